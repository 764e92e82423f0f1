"""SGLang's own implementations, wrapped so the benchmarks can time them
side by side with ours (each module imports sglang and raises ImportError
when it is absent).

Which op has which baseline is said once, in its spec
(`OpSpec.sglang_baselines`: kind -> ``"module:function"`` of this package);
the tables below are read off the specs. Importing this package imports no
SGLang: a table's modules are imported when it is asked for."""

from __future__ import annotations

import importlib

from ....ops.spec import with_baseline


def _table(kind: str) -> dict:
    """``{op: function}`` for the ops whose spec names a `kind` baseline."""
    table = {}
    for op, where in with_baseline(kind).items():
        module, _, function = where.partition(":")
        # By name, from this package: the spec (kernel side) cannot import
        # SGLang, so it names the function; the module imports SGLang.
        table[op] = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    return table


def bench_baselines() -> dict:
    """``{op: {"sglang": fn(case) -> thunk}}``: SGLang's kernel for the op,
    run on a bench case's inputs (`OpCase.args`, the op's positional inputs)."""
    return {op: {"sglang": fn} for op, fn in _table("bench").items()}


def inspect_baselines() -> dict:
    """``{op: fn(shape, dtype) -> [KernelSpec]}``: SGLang's kernels for the
    op's job, planned for the active target the way SGLang's launchers plan
    them (`kunlun-triton inspect --compare sglang`)."""
    return _table("inspect")


def traffic_baselines() -> dict:
    """``{op: fn(shape, dtype) -> bytes}``: what one call of SGLang's kernels
    for the op moves, as its backend splits the work on an H200."""
    return _table("traffic")


def programs_baselines() -> dict:
    """``{op: fn(shape, dtype) -> programs}``: stage-1 programs with work in
    one call of SGLang's kernels, as its backend splits on an H200."""
    return _table("programs")


def launcher_baselines() -> dict:
    """``{op: fn(shape, dtype, device) -> call}``: SGLang's launcher for the
    op on real tensors of `shape`, its scratch allocated once as its backend
    does (for timing the launcher with launches stubbed)."""
    return _table("launcher")
