"""A non-editable install (a wheel, a cluster image) finds its configs from any directory."""

import os
import site
import subprocess
import sys
import venv
from pathlib import Path

from tests.conftest import TINY_DATA, TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]


def test_a_wheel_trains_from_an_unrelated_directory(tmp_path, cache_dir):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(ROOT)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # The dependencies come from this environment; alignmt itself only from the wheel.
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    wheel = next(wheels.glob("alignmt-*.whl"))
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [env_dir / "bin" / "alignmt-train", "trainer.max_steps=20", "trainer.val_check_interval=10",
         "trainer.enable_progress_bar=false", f"data.corpus.cache_dir={cache_dir}",
         *TINY_DATA, *TINY_MODEL, f"hydra.run.dir={elsewhere / 'run'}"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (elsewhere / "run" / "metrics.json").is_file()
    located = subprocess.run(
        [python, "-c", "import alignmt.config as c; print(c.__file__, c.CONF_DIR.is_dir())"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert located.startswith(str(env_dir)) and located.strip().endswith("True")
    # The attention's native pass is compiled from a source file the wheel must carry.
    source = subprocess.run(
        [python, "-c", "import alignmt.models.native_energies as n; print(n.SOURCE.is_file())"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert source.strip() == "True"
