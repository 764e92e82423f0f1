"""Logits family: `logit_softcap`, final-logit soft-capping over the
vocabulary (Gemma-2 and friends), in place (kernels, launcher, reference, spec)."""

from .ops import logit_softcap

__all__ = ["logit_softcap"]
