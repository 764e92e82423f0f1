"""Both ends of the SGLang window end to end: the same tiny Llama, greedy, on
SGLang 0.5.21 (installed ``pip install --no-deps --target DIR`` over the
0.5.23 environment, DIR first on PYTHONPATH: how vendor stacks install
SGLang) and on the environment's own SGLang 0.5.23; the tokens must be the
same, our kernels must have run, and no SGLang deprecation warning may name
our platform.

Marked ``sglang_window``: CI's ``sglang-window`` stage (scripts/test.sh)
installs 0.5.21 into ``.sglang-0.5.21/`` and names it in
``KUNLUN_TRITON_OLD_SGLANG``; without it this test fails (it never skips).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kunlun_triton.sglang_plugin.platform.versions import SUPPORTED_SGLANG_VERSIONS

pytestmark = pytest.mark.sglang_window

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUR_OPS = {"decode_attention", "extend_attention", "store_kv", "rms_norm", "silu_and_mul", "rotary_embedding"}


def _old_sglang_dir() -> str:
    old = os.environ.get("KUNLUN_TRITON_OLD_SGLANG")
    assert old and (Path(old) / "sglang").is_dir(), (
        "KUNLUN_TRITON_OLD_SGLANG must name a --target dir holding SGLang "
        f"{SUPPORTED_SGLANG_VERSIONS[0]}: KUNLUN_TRITON_TEST_STAGES=sglang-window scripts/test.sh"
    )
    return str(Path(old).resolve())


def _generate(model, old_dir: str | None):
    # The old release only where asked: the pytest process may run with it on PYTHONPATH.
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    inherited = [p for p in inherited if Path(p).resolve() != Path(old_dir or _old_sglang_dir()).resolve()]
    path = ([old_dir] if old_dir else []) + [str(REPO), str(HERE)] + inherited
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "SGLANG_PLATFORM": "kunlun",
           "SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS": "0"}  # fmt: skip
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(HERE / "kt_window_generate.py"), model], env=env, cwd=str(HERE),
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    deprecations = [
        line for line in done.stderr.splitlines()
        if "deprecat" in line.lower() and ("kunlun" in line.lower() or "/sglang/" in line)
    ]  # fmt: skip
    return result, deprecations


def test_oldest_and_newest_sglang_generate_the_same_greedy_tokens(tiny_llama):
    old_dir = _old_sglang_dir()
    old, old_deprecations = _generate(tiny_llama, old_dir)
    new, new_deprecations = _generate(tiny_llama, None)

    assert old["sglang"] == SUPPORTED_SGLANG_VERSIONS[0] and old["sglang_file"].startswith(old_dir)
    assert new["sglang"] == SUPPORTED_SGLANG_VERSIONS[-1]
    for run in (old, new):
        assert run["platform"] == "KunlunDevPlatform"
        assert OUR_OPS <= set(run["triton_ops"]), run["triton_ops"]
        assert len(run["tokens"]) == 2 and all(len(t) == 6 for t in run["tokens"])
    assert old["tokens"] == new["tokens"]
    assert old_deprecations == [] and new_deprecations == [], old_deprecations + new_deprecations
