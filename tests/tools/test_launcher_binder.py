"""`inspect --launcher-us` with the launch stubbed below Triton's binder
(issue 24): Triton's own JITFunction.run binds, specialises and looks the
kernel up in its cache on every call; only the compile (once per key) and
the driver's launch are stand-ins, and nothing of a real device's state is
touched. Compiled-mode kernels only, so it runs in a child without
TRITON_INTERPRET."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kunlun_triton.introspect.launches import stubbed_below_binder

CHILD = r"""
import json, torch
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction
from kunlun_triton.introspect.launches import _StubDriver, stubbed_below_binder
from kunlun_triton.ops import rms_norm
from kunlun_triton.ops.norm.kernels import rms_norm_kernel
from kunlun_triton.runtime import Target, targeting

assert isinstance(rms_norm_kernel, JITFunction)
before = driver._active
x, w = torch.randn(8, 4096, dtype=torch.bfloat16), torch.ones(4096, dtype=torch.bfloat16)
with targeting(Target("cuda", "sm_90", "cpu", "test")):
    with stubbed_below_binder():
        for _ in range(50):
            rms_norm(x, w, 1e-6, check=False)
        keys_one_shape = len(rms_norm_kernel.device_caches[_StubDriver.DEVICE][0])
        rms_norm(x[:, :64].contiguous(), w[:64].contiguous(), 1e-6, check=False)  # another specialisation
        keys_two_shapes = len(rms_norm_kernel.device_caches[_StubDriver.DEVICE][0])
print(json.dumps({"one": keys_one_shape, "two": keys_two_shapes, "restored": driver._active is before,
                  "devices": [str(d) for d in rms_norm_kernel.device_caches]}))
"""


def test_binder_and_cache_lookup_run_on_every_stubbed_launch():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # 50 calls of one shape: one cache entry (49 hits); a new shape: a second key from the binder
    assert (result["one"], result["two"]) == (1, 2), result
    assert result["restored"] and result["devices"] == ["kunlun-triton-stub"], result


def _noop(x_ptr):
    pass


def test_interpreted_kernels_are_refused():
    """An interpreted kernel (TRITON_INTERPRET) has no binder to count."""
    import torch
    from triton.runtime.interpreter import InterpretedFunction

    kernel = InterpretedFunction(_noop)
    with stubbed_below_binder(), pytest.raises(RuntimeError, match="no binder"):
        kernel.run(torch.zeros(1), grid=(1,), warmup=False)
