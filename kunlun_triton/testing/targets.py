"""Run an op with another target's shipped configs, under the interpreter.

A config that breaks a kernel's maths (ragged tiles, head splits, several
rows per program) then fails on this machine, not first on the card::

    for target in SHIPPED_TARGETS:
        rms_norm(x, w, config=get_config("rms_norm", target=target, hidden_size=x.shape[-1]))
"""

from __future__ import annotations

from ..introspect.aot import aot_target  # noqa: F401 (a lowering test's companion of LOWERING_TARGETS)
from ..runtime import Target
from ..runtime.capabilities import default_target, target_names_where

# The device targets on their default parts, and "torch", which has no file of
# its own (it reads default.yaml).
SHIPPED_TARGETS = tuple(default_target(name, "test") for name in (*target_names_where(lambda c: c.device), "torch"))


def shipped_target(name: str) -> Target:
    """The shipped target called `name` (``SHIPPED_TARGETS``' order is
    ``TARGET_NAMES``', which a test should not have to know)."""
    return next(target for target in SHIPPED_TARGETS if target.name == name)


def target_id(target: Target) -> str:
    """A pytest id: ``cuda-sm_90``."""
    return f"{target.name}-{target.arch}"

# Targets whose launch plans are compiled ahead of time by the lowering tests.
# No Kunlun compiler is reachable here: Kunlun's plans (tl.sum formulation,
# LOAD_IGNORES_OTHER) are compiled for sm_90 as a proxy.
LOWERING_TARGETS = tuple(default_target(name, "test") for name in target_names_where(lambda c: c.device))
