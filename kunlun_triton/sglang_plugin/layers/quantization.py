"""SGLang's ``--quantization w8a8_int8`` on our ops.

SGLang 0.5.23's ``W8A8Int8LinearMethod.apply`` quantizes activations with
its Triton ``per_token_quant_int8`` (CUDA's ``libdevice.round``: fails on
every other target) and multiplies with ``sgl_kernel.int8_scaled_mm``
(imported on CUDA only). On the kunlun platform an AROUND hook
(`int8_linear_apply`) routes the call to `per_token_quant_int8` +
`int8_scaled_mm`; the layer's weight is SGLang's ``weight.t()`` view
([K, N], int8) and ``weight_scale`` [N, 1] fp32, taken as they are (no
copy). SGLang's CPU engine paths (AMX, arm64) stay SGLang's. The MoE half
(``W8A8Int8MoEMethod.apply`` -> fused_experts with ``use_int8_w8a8``) is
`moe.int8_experts_apply`.
"""

from __future__ import annotations

from ..platform.mode import dev_mode

LINEAR_HOOK = "sglang.srt.layers.quantization.w8a8_int8.W8A8Int8LinearMethod.apply"
MOE_HOOK = "sglang.srt.layers.quantization.w8a8_int8.W8A8Int8MoEMethod.apply"


def int8_linear_apply(original, self, layer, x, bias=None):
    from kunlun_triton import ops

    from .moe import use_intel_amx_or_arm

    if use_intel_amx_or_arm(layer) or not x.dtype.is_floating_point:
        return original(self, layer, x, bias)
    check = dev_mode()
    x_q, x_scale = ops.per_token_quant_int8(x, check=check)
    out = ops.int8_scaled_mm(x_q.view(-1, x_q.shape[-1]), layer.weight, x_scale.view(-1, 1), layer.weight_scale,
                             x.dtype, bias, check=check)  # fmt: skip
    return out.view(*x.shape[:-1], layer.weight.shape[1])
