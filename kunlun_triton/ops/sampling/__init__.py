"""Sampling family: `sample`, `greedy` and the renormalising filters
(`top_k_renorm_probs`, `top_p_renorm_probs`, `min_p_renorm_probs`,
`renorm_probs`) and speculative decoding's verify step
(`tree_speculative_sampling_target_only`): kernels, launchers, reference, spec."""

from .ops import greedy, sample
from .renorm import min_p_renorm_probs, renorm_probs, top_k_renorm_probs, top_p_renorm_probs
from .tree_sampling import tree_speculative_sampling_target_only

__all__ = ["greedy", "min_p_renorm_probs", "renorm_probs", "sample", "top_k_renorm_probs", "top_p_renorm_probs",
           "tree_speculative_sampling_target_only"]
