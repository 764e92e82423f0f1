"""Gated activation family: `silu_and_mul` and `gelu_and_mul` (kernels,
launchers, reference, spec)."""

from .ops import gelu_and_mul, silu_and_mul

__all__ = ["gelu_and_mul", "silu_and_mul"]
