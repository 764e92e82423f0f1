"""Run an op with another target's shipped configs, under the interpreter.

A config that breaks a kernel's maths (ragged tiles, head splits, several
rows per program) then fails on this machine, not first on the card.
"""

from __future__ import annotations

from ..runtime import Target

# Target "torch" has no file of its own: it reads default.yaml.
SHIPPED_TARGETS = (
    Target("cuda", "sm_90", "cuda", "test"),
    Target("hip", "gfx942", "cuda", "test"),
    Target("kunlun", "p800", "cuda", "test"),
    Target("torch", "cpu", "cpu", "test"),
)


def target_id(target: Target) -> str:
    """A pytest id: ``cuda-sm_90``."""
    return f"{target.name}-{target.arch}"


def use_configs_of(monkeypatch, op_module, target: Target) -> None:
    """Make `op_module` look its launch configs up for `target` for the rest
    of the test (`monkeypatch` is pytest's fixture)."""
    real = op_module.get_config
    monkeypatch.setattr(op_module, "get_config", lambda op, **shape: real(op, target=target, **shape))
