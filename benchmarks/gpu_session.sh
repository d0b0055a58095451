#!/usr/bin/env bash
# The first command of a session with an H200 (under 8 minutes in all): the missing Python
# packages from .whl/ (benchmarks/gpu_README.md says how to fetch them), the CUDA tests of the
# decoder's fast path, then benchmarks/gpu.py at paper size. Run from the repository root:
#
#     bash benchmarks/gpu_session.sh            (device tool: carry [".whl"], timeout 560)
#
# Logs and results.json land in $OUT (or /tmp/alignmt-gpu-session); the last lines printed
# are the benchmark's figures.
set -o pipefail
OUT=${OUT:-/tmp/alignmt-gpu-session}
mkdir -p "$OUT"
started=$(date +%s)
pip_install() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$@"
}
pip_install .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PYTHONUNBUFFERED=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
# datasets 5.2 needs pyarrow 24 or later: the wheel in .whl/optional only if the machine's is older
python3 -c "import pyarrow, sys; sys.exit(int(pyarrow.__version__.split('.')[0]) < 24)" \
  || pip_install .whl/optional/pyarrow-*.whl || exit 1
python3 - <<'EOF' || exit 1
import datasets, hydra, omegaconf, pyarrow, pytorch_lightning, sacrebleu, torch
print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), "Lightning",
      pytorch_lightning.__version__, "hydra", hydra.__version__, "datasets", datasets.__version__,
      "pyarrow", pyarrow.__version__, "sacrebleu", sacrebleu.__version__)
print(torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).total_memory / 2**30, "GiB")
EOF
echo "== CUDA tests of the fast path"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/unit/test_gpu_path.py -k cuda_graphs \
  2>&1 | tee "$OUT/tests.log" | tail -25
echo "== benchmarks/gpu.py ($(( $(date +%s) - started )) s so far)"
timeout 360 python3 benchmarks/gpu.py --out /tmp/alignmt-gpu-benchmark --time-limit 270 \
  >"$OUT/benchmark.log" 2>&1
status=$?
grep -E "^(device|model|train|check|decode|speedup|best|skip|FAILED|total)" "$OUT/benchmark.log"
[ $status -eq 0 ] || tail -40 "$OUT/benchmark.log"
cp /tmp/alignmt-gpu-benchmark/results.json "$OUT/" 2>/dev/null
echo "== $(( $(date +%s) - started )) s in all, exit $status"
exit $status
