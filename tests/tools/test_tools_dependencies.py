"""The tools run with the runtime dependencies and the `tools` extra only:
no hypothesis, no pytest (a user's `pip install -e ".[tools]"`)."""

import os
import subprocess
import sys

BLOCKED = """
import sys
for name in ("hypothesis", "pytest"):
    sys.modules[name] = None  # `import name` now raises ImportError
from kunlun_triton import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k != "KUNLUN_TRITON_BACKEND"}
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], capture_output=True, text=True, env=env, timeout=600)


def test_doctor_bench_tune_and_inspect_import_without_test_dependencies():
    done = _run("doctor", "norm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rms_norm" in done.stdout and "all on the Triton path" in done.stdout
    done = _run("bench", "--list", "--quick")
    assert done.returncode == 0 and "attention.decode_attention" in done.stdout, done.stderr
    done = _run("tune", "rms_norm", "--quick", "--dry-run", "--repeat", "1", "--warmup", "0")
    assert done.returncode == 0 and "rms_norm" in done.stdout, done.stderr
    done = _run("inspect", "rms_norm", "--no-compile", "--compilations")
    assert done.returncode == 0 and "rms_norm_kernel" in done.stdout, done.stderr
