"""Rotary embedding family: `rotary_embedding` (kernel, launcher, reference, spec)."""

from .ops import rotary_embedding

__all__ = ["rotary_embedding"]
