"""Sampling family: `sample`, `greedy` and the renormalising filters
(`top_k_renorm_probs`, `top_p_renorm_probs`, `min_p_renorm_probs`,
`renorm_probs`): kernels, launchers, reference, spec."""

from .ops import greedy, sample
from .renorm import min_p_renorm_probs, renorm_probs, top_k_renorm_probs, top_p_renorm_probs

__all__ = ["greedy", "min_p_renorm_probs", "renorm_probs", "sample", "top_k_renorm_probs", "top_p_renorm_probs"]
