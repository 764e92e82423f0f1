"""Linear-attention family (gated delta net): causal conv1d, the gated delta
rule's decode and chunked prefill, the split of the input projections
(kernels, launchers, references, spec)."""

from .conv import causal_conv1d, causal_conv1d_update
from .gdn import gated_delta_rule_decode, gated_delta_rule_prefill
from .split_qkvzba import gdn_split_qkvzba

__all__ = ["causal_conv1d", "causal_conv1d_update", "gated_delta_rule_decode", "gated_delta_rule_prefill",
           "gdn_split_qkvzba"]
