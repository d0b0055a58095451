#!/usr/bin/env bash
# Creates one virtualenv per peer toolkit, outside the repository, for the side-by-side speed
# comparison (benchmarks/peers/peers.py):
#   $PEERS_DIR/joeynmt   Joey NMT 2.2.1
#   $PEERS_DIR/onmt      OpenNMT-py 3.5.1
# PEERS_DIR defaults to ~/.cache/alignmt-peers; PYTHON (default python3) makes the venvs.
# Both get their own CPU torch==2.13.0, installed first and then held by a constraints file so
# no later step can swap it for another build. Idempotent: a venv whose packages are already
# at the wanted versions is left alone; one that is partly installed is completed.
set -euo pipefail

PEERS_DIR="${PEERS_DIR:-$HOME/.cache/alignmt-peers}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="torch==2.13.0"

# Exit 0 when every "name==version" given is installed in the venv whose python is $1.
has_versions() {
  local py="$1"
  shift
  [ -x "$py" ] || return 1
  "$py" - "$@" <<'PY' 2>/dev/null
import sys
from importlib.metadata import PackageNotFoundError, version

for spec in sys.argv[1:]:
    name, wanted = spec.split("==")
    try:
        got = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if got.split("+")[0] != wanted:
        sys.exit(1)
PY
}

# make_venv DIR: the venv with CPU torch in it; prints the path of a constraints file that
# pins the installed torch.
make_venv() {
  local dir="$1"
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  if ! has_versions "$dir/bin/python" "$TORCH_SPEC"; then
    "$dir/bin/python" -m pip install -q "$TORCH_SPEC" >&2
  fi
  if ! "$dir/bin/python" -W ignore -c "import sys, torch; sys.exit(torch.version.cuda is not None)"; then
    echo "error: $dir has a CUDA build of torch; remove $dir and rerun" >&2
    exit 1
  fi
  "$dir/bin/python" -W ignore -c "import torch; print('torch==' + torch.__version__)" > "$dir/torch-pin.txt"
  echo "$dir/torch-pin.txt"
}

mkdir -p "$PEERS_DIR"

# Joey NMT 2.2.1 imports pkg_resources, which setuptools 81 removed.
JOEY="$PEERS_DIR/joeynmt"
if has_versions "$JOEY/bin/python" "$TORCH_SPEC" joeynmt==2.2.1 \
  && "$JOEY/bin/python" -c "import pkg_resources" 2>/dev/null; then
  echo "joeynmt: already installed in $JOEY"
else
  echo "joeynmt: installing into $JOEY"
  pin="$(make_venv "$JOEY")"
  "$JOEY/bin/python" -m pip install -q -c "$pin" "$TORCH_SPEC" joeynmt==2.2.1 "setuptools<81"
fi

# OpenNMT-py 3.5.1 pins an older torch, so it goes in without its dependencies and these
# follow (it imports spacy at start).
ONMT="$PEERS_DIR/onmt"
if has_versions "$ONMT/bin/python" "$TORCH_SPEC" opennmt-py==3.5.1 \
  && "$ONMT/bin/python" -c "import onmt.bin.train, onmt.bin.translate" 2>/dev/null; then
  echo "opennmt-py: already installed in $ONMT"
else
  echo "opennmt-py: installing into $ONMT"
  pin="$(make_venv "$ONMT")"
  "$ONMT/bin/python" -m pip install -q -c "$pin" --no-deps opennmt-py==3.5.1
  "$ONMT/bin/python" -m pip install -q -c "$pin" configargparse pyyaml sacrebleu six rapidfuzz \
    pyahocorasick "pyonmttok>=1.37,<2" "ctranslate2>=4,<5" tensorboard spacy fasttext-wheel \
    flask waitress
fi

for dir in "$JOEY" "$ONMT"; do
  "$dir/bin/python" -W ignore -c "import torch; assert torch.version.cuda is None" \
    || { echo "error: $dir ended up with a CUDA torch" >&2; exit 1; }
done
echo "peers ready in $PEERS_DIR ($(du -sh "$PEERS_DIR" | cut -f1))"
