"""Compile kernels ahead of time for real GPU targets, with no device.

`triton.compile` with a `GPUTarget` lowers a kernel to PTX/cubin (CUDA) or
AMDGCN/hsaco (HIP) on a CPU-only machine, so a kernel that only works in the
interpreter is caught, and its machine code can be measured
(`kunlun_triton.introspect.sass`). Triton swaps every ``@triton.jit`` for an
interpreted function at decoration time when ``TRITON_INTERPRET=1``, so
compilation runs in a child process with the variable unset; one child
compiles a whole batch.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field

# name -> GPUTarget(backend, arch, warp_size)
from ..runtime.capabilities import AOT_TARGETS, aot_name


@dataclass(frozen=True)
class KernelSpec:
    """A kernel to compile: ``"package.module:kernel_name"``, its argument
    types in Triton's notation (``*fp16``, ``i32``, ``fp32``, ``constexpr``),
    the constexpr values (a Triton dtype by name: ``"tl.bfloat16"``), compile options (``num_warps``, ``num_stages``,
    HIP's ``waves_per_eu`` ...; a backend ignores the ones it lacks) and the
    arguments known divisible by 16 (``{name: [["tt.divisibility", 16]]}``,
    what Triton's launcher proves for aligned pointers and strides; without
    them loads are not vectorised). `kunlun_triton.introspect.launches.
    kernel_specs` records these from a real launcher call."""

    kernel: str
    signature: dict
    constexprs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    loop_items: int | None = None  # items (keys, elements) one iteration of the main loop covers; for inspect
    # what one call runs, for per-token counts (inspect): {"programs", "tokens",
    # "trips": iterations per program of each SASS loop in address order, or None}
    work: dict | None = None

    @property
    def name(self) -> str:
        return self.kernel.split(":")[-1]

    @property
    def label(self) -> str:
        values = ",".join(f"{k}={v}" for k, v in sorted(self.constexprs.items()))
        return f"{self.name}[{values}]"


_CHILD = r"""
import base64, importlib, json, sys, traceback
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
jobs = json.load(sys.stdin)
results = []
for job in jobs:
    module, name = job["kernel"].split(":")
    fn = getattr(importlib.import_module(module), name)
    while not isinstance(fn, triton.runtime.jit.JITFunction):  # under @triton.autotune / heuristics
        fn = fn.fn
    try:
        # a Triton dtype travels as its name ("tl.bfloat16": JSON has no dtypes)
        constexprs = {k: getattr(tl, v[3:]) if isinstance(v, str) and v.startswith("tl.") else v
                      for k, v in job["constexprs"].items()}
        attrs = {(fn.arg_names.index(k),): v for k, v in job["attrs"].items()}
        src = ASTSource(fn=fn, signature=job["signature"], constexprs=constexprs, attrs=attrs)
        compiled = triton.compile(src, target=GPUTarget(*job["target"]), options=job["options"] or None)
        res = {"ok": True, "asm": sorted(compiled.asm)}
        if job["artifacts"]:
            meta = compiled.metadata
            res["metadata"] = {"name": meta.name, "shared": meta.shared, "num_warps": meta.num_warps,
                               "num_stages": meta.num_stages}
            if "cubin" in compiled.asm:
                res["cubin"] = base64.b64encode(compiled.asm["cubin"]).decode()
            if "amdgcn" in compiled.asm:
                res["amdgcn"] = compiled.asm["amdgcn"]
        results.append(res)
    except Exception as exc:
        results.append({"ok": False, "error": "".join(traceback.format_exception(exc))[-6000:]})
json.dump(results, sys.stdout)
"""


def compile_ahead_of_time(specs, targets=tuple(AOT_TARGETS), timeout: float = 900, artifacts: bool = False,
                          python: str | None = None) -> list[dict]:  # fmt: skip
    """Compile every spec for every target; returns one dict per (spec, target):
    ``{"spec", "target", "ok", "asm" | "error"}``, plus with `artifacts` the
    ``metadata`` (name, shared memory, warps, stages) and ``cubin`` (bytes) or
    ``amdgcn`` (text). Never raises for a kernel that fails to compile (the
    caller asserts), only for a broken child. `python`: the interpreter to
    compile with (default: this one). An entry of `specs` may be a
    ``(spec, target)`` pair: compiled for that target only (one child for
    several targets' plans)."""
    pairs = []
    for item in specs:
        pairs += [item] if isinstance(item, tuple) else [(item, t) for t in targets]
    jobs = [
        {**asdict(spec), "target": list(AOT_TARGETS[t]), "target_name": t, "artifacts": artifacts}
        for spec, t in pairs
    ]
    # SGLANG_PLATFORM=kunlun would turn the interpreter back on in the child
    # (the plugin's development mode) when it imports SGLang's kernels.
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "SGLANG_PLATFORM")}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    done = subprocess.run(
        [python or sys.executable, "-c", _CHILD],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ahead-of-time compile child failed:\n{done.stderr[-4000:]}")
    results = json.loads(done.stdout)
    for res in results:
        if "cubin" in res:
            res["cubin"] = base64.b64decode(res["cubin"])
    return [{"spec": spec, "target": job["target_name"], **res} for ((spec, _), job, res) in zip(pairs, jobs, results)]


def aot_target(target) -> str:
    """The `AOT_TARGETS` name a target's (`runtime.Target`) plans compile
    for: HIP's for ``hip``, CUDA sm_90's for the rest (no Kunlun compiler is
    reachable here: Kunlun's plans compile for sm_90 as a proxy)."""
    return aot_name(target)
