"""RMSNorm family: `rms_norm`, `fused_add_rms_norm`, `gated_rms_norm` (kernels, launchers,
reference, spec)."""

from .ops import fused_add_rms_norm, gated_rms_norm, rms_norm

__all__ = ["fused_add_rms_norm", "gated_rms_norm", "rms_norm"]
