"""Compile kernels ahead of time for real GPU targets, with no device.

`triton.compile` with a `GPUTarget` lowers a kernel to PTX/cubin (CUDA) or
AMDGCN/hsaco (HIP) on a CPU-only machine, so a kernel that only works in the
interpreter is caught. Triton swaps every ``@triton.jit`` for an interpreted
function at decoration time when ``TRITON_INTERPRET=1``, so compilation runs
in a child process with the variable unset; one child compiles a whole batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field

# name -> GPUTarget(backend, arch, warp_size)
AOT_TARGETS = {"cuda": ("cuda", 90, 32), "hip": ("hip", "gfx942", 64)}


@dataclass(frozen=True)
class KernelSpec:
    """A kernel to compile: ``"package.module:kernel_name"``, its argument
    types in Triton's notation (``*fp16``, ``i32``, ``fp32``, ``constexpr``)
    and the constexpr values (a Triton dtype by name: ``"tl.bfloat16"``)."""

    kernel: str
    signature: dict
    constexprs: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        values = ",".join(f"{k}={v}" for k, v in sorted(self.constexprs.items()))
        return f"{self.kernel.split(':')[-1]}[{values}]"


_CHILD = r"""
import importlib, json, sys, traceback
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
jobs = json.load(sys.stdin)
results = []
for job in jobs:
    module, name = job["kernel"].split(":")
    fn = getattr(importlib.import_module(module), name)
    try:
        # a Triton dtype travels as its name ("tl.bfloat16": JSON has no dtypes)
        constexprs = {k: getattr(tl, v[3:]) if isinstance(v, str) and v.startswith("tl.") else v
                      for k, v in job["constexprs"].items()}
        src = ASTSource(fn=fn, signature=job["signature"], constexprs=constexprs)
        compiled = triton.compile(src, target=GPUTarget(*job["target"]))
        results.append({"ok": True, "asm": sorted(compiled.asm)})
    except Exception as exc:
        results.append({"ok": False, "error": "".join(traceback.format_exception(exc))[-6000:]})
json.dump(results, sys.stdout)
"""


def compile_ahead_of_time(specs, targets=tuple(AOT_TARGETS), timeout: float = 900) -> list[dict]:
    """Compile every spec for every target; returns one dict per (spec, target):
    ``{"spec", "target", "ok", "asm" | "error"}``. Never raises for a kernel
    that fails to compile (the caller asserts), only for a broken child."""
    jobs = [
        {**asdict(spec), "target": list(AOT_TARGETS[t]), "target_name": t}
        for spec in specs
        for t in targets
    ]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ahead-of-time compile child failed:\n{done.stderr[-4000:]}")
    results = json.loads(done.stdout)
    return [
        {"spec": spec, "target": job["target_name"], **res}
        for (spec, job, res) in zip([s for s in specs for _ in targets], jobs, results)
    ]


def assert_lowers(specs, targets=tuple(AOT_TARGETS)) -> None:
    """Compile all specs and raise one AssertionError listing every failure."""
    failures = [
        f"{r['spec'].label} on {r['target']}: {r['error']}"
        for r in compile_ahead_of_time(specs, targets)
        if not r["ok"]
    ]
    if failures:
        raise AssertionError("kernels failed to lower:\n" + "\n".join(failures))
