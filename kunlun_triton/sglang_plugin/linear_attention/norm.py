"""The gated RMSNorm after a gated-delta-net layer, on ``ops.gated_rms_norm``.

Qwen3-Next and Qwen3.5 normalise the delta rule's output per value head and
gate it with ``silu(z)`` (``rms_norm(o) * weight * silu(z)``, FLA's
``norm_before_gate``). SGLang 0.5.23 builds it from one of two FLA modules,
plain ``nn.Module``s outside its fused-op dispatch:
``fla.layernorm_gated.RMSNorm`` (Qwen3.5; Qwen3-Next under piecewise prefill
graphs) and ``fla.fused_norm_gate.FusedRMSNormGated`` (Qwen3-Next). Their
forwards run FLA's Triton kernels; the AROUND hooks below run ours for the
form the models use (silu / swish gate, norm before the gate, one group a
row, no bias, no residual) and leave any other form to FLA.
Scope: platform. Test: tests/sglang_plugin/test_sglang_qwen3_next.py.
"""

from __future__ import annotations

GATED_NORM_HOOK = "sglang.kernels.ops.attention.fla.layernorm_gated.RMSNorm.forward"
FUSED_GATED_NORM_HOOK = "sglang.kernels.ops.attention.fla.fused_norm_gate.FusedRMSNormGated.forward"
_GATES = ("silu", "swish")


def _gated(module, x, z):
    from kunlun_triton import ops

    from ..platform.mode import dev_mode

    return ops.gated_rms_norm(x, z, module.weight, module.eps, check=dev_mode())


def gated_norm_forward(original, self, x, z=None):
    """AROUND ``layernorm_gated.RMSNorm.forward``."""
    width = x.shape[-1]
    if (z is None or getattr(self, "bias", None) is not None or not getattr(self, "norm_before_gate", False)
            or getattr(self, "activation", "swish") not in _GATES or self.group_size not in (None, width)):  # fmt: skip
        return original(self, x, z)
    return _gated(self, x, z)


def fused_gated_norm_forward(original, self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
    """AROUND ``FusedRMSNormGated.forward`` (always norm before the gate)."""
    if residual is not None or prenorm or self.weight is None or self.activation not in _GATES:
        return original(self, x, g, residual, prenorm, residual_in_fp32)
    return _gated(self, x, g)
