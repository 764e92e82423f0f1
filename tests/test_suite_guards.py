"""The test suite cannot pass on the fallback path: with no Triton target
(``KUNLUN_TRITON_TARGET=torch``) a kernel test fails instead of comparing the
torch reference with itself (the conftest forces ``KUNLUN_TRITON_BACKEND=triton``)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_kernel_tests_fail_without_a_triton_target():
    env = {**os.environ, "KUNLUN_TRITON_TARGET": "torch"}
    env.pop("KUNLUN_TRITON_BACKEND", None)  # as a fresh shell: the conftest sets it
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/ops/test_norm.py",
         "-k", "matches_oracle"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    assert "DispatchError" in done.stdout and " failed" in done.stdout, done.stdout[-2000:]
