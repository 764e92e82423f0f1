"""What the families' ``tune_space`` hooks share (`kunlun-triton tune`).

A candidate config is launched through the public op, never through a copy
of its launcher: `config_injected` makes the op's module answer its
``get_config`` lookups with the runtime's own answer overlaid by the
candidate, which is exactly what the runtime returns once the candidate is
written to a tuned file (tuned values overlay the shipped ones key by key).
`checked_thunk` runs the op once that way and compares it with the torch
reference before handing back the thunk to time, so a config that computes
the wrong thing raises there and `tune` records it as failed: it never wins.
"""

from __future__ import annotations

import contextlib
import itertools
import sys

from ...runtime import capabilities


@contextlib.contextmanager
def config_injected(op_fn, config_op: str, config: dict):
    """While open, the module that defines `op_fn` looks `config_op` up as
    ``{**get_config(config_op, **shape), **config}``; other ops unchanged.
    (The same move as ``testing.targets.use_configs_of``, without pytest.)"""
    module = sys.modules[op_fn.__module__]
    real = module.get_config

    def injected(op, *args, **shape):
        found = real(op, *args, **shape)
        return {**found, **config} if op == config_op else found

    module.get_config = injected
    try:
        yield
    finally:
        module.get_config = real


def checked_thunk(op_fn, config_op: str, config: dict, run, check):
    """The thunk ``tune`` times: `run()` (which calls `op_fn`, returning what
    `check` needs) with `config` injected. It runs once first and
    ``check(result)`` must pass (raise when wrong), or the candidate fails."""

    def thunk():
        with config_injected(op_fn, config_op, config):
            return run()

    check(thunk())
    return thunk


def grid(keep=None, **axes) -> list[dict]:
    """Every combination of the axes' values (``grid(A=(1, 2), B=(8,))``),
    those `keep(config)` rejects left out."""
    names = list(axes)
    configs = [dict(zip(names, values)) for values in itertools.product(*axes.values())]
    return [c for c in configs if keep is None or keep(c)]


def with_warps(candidates: list[dict], quick: bool, warps=(4, 8)) -> list[dict]:
    """Each candidate at each of `warps` where num_warps means something on
    this target (not under ``--quick``)."""
    if quick or not capabilities().num_warps_meaningful:
        return candidates
    return [{**c, "num_warps": w} for c in candidates for w in warps]


def formulations() -> tuple:
    """The attention formulations worth trying here: dot and sum where tl.dot
    works, otherwise none (the target's file picks sum)."""
    return ("dot", "sum") if capabilities().has_dot else ()


def with_formulations(candidates: list[dict], keep=None) -> list[dict]:
    """Each candidate with each formulation of `formulations()` (unchanged
    where there is none to choose); `keep(config)` filters the result."""
    forms = formulations()
    out = [{**c, "formulation": f} for c in candidates for f in forms] if forms else list(candidates)
    return [c for c in out if keep is None or keep(c)]


def device() -> str:
    from ...runtime import current_target

    return current_target().device_type
