"""Linear-attention family (gated delta net): causal conv1d, the gated delta
rule's decode and chunked prefill (kernels, launchers, references, spec)."""

from .conv import causal_conv1d, causal_conv1d_update
from .gdn import gated_delta_rule_decode, gated_delta_rule_prefill

__all__ = ["causal_conv1d", "causal_conv1d_update", "gated_delta_rule_decode", "gated_delta_rule_prefill"]
