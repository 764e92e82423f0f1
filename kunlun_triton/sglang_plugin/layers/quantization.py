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

gpt-oss's int8 experts (``convert-weights --quantize w8a8-int8``, from its
float or MXFP4 checkpoint) carry biases, which SGLang's
``W8A8Int8MoEMethod.create_weights`` does not create: its loader would drop
them without a word. `int8_experts_create_weights` (AROUND) adds
``w13_weight_bias`` / ``w2_weight_bias`` as the unquantized method has them
(fused_experts reads them off the layer), and under gpt-oss's fused loader
gives ``w2_weight_scale`` a loader that copies it whole: that loader
otherwise narrows the per-output-row scale [E, hidden, 1] along the
intermediate dimension it shards, which is 1 wide there (a zero scale at
TP 2).
"""

from __future__ import annotations

from ..platform.mode import dev_mode

LINEAR_HOOK = "sglang.srt.layers.quantization.w8a8_int8.W8A8Int8LinearMethod.apply"
MOE_HOOK = "sglang.srt.layers.quantization.w8a8_int8.W8A8Int8MoEMethod.apply"
MOE_WEIGHTS_HOOK = "sglang.srt.layers.quantization.w8a8_int8.W8A8Int8MoEMethod.create_weights"


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


def int8_experts_create_weights(original, self, layer, num_experts, hidden_size, intermediate_size_per_partition,
                                params_dtype, with_bias=False, **extra_weight_attrs):  # fmt: skip
    import torch
    from sglang.srt.utils import set_weight_attrs

    original(self, layer, num_experts, hidden_size, intermediate_size_per_partition, params_dtype,
             **extra_weight_attrs)  # fmt: skip
    if not with_bias:
        return
    biases = {"w13_weight_bias": (num_experts, 2 * intermediate_size_per_partition),
              "w2_weight_bias": (num_experts, hidden_size)}  # fmt: skip
    for name, shape in biases.items():
        param = torch.nn.Parameter(torch.zeros(shape, dtype=params_dtype), requires_grad=False)
        layer.register_parameter(name, param)
        set_weight_attrs(param, extra_weight_attrs)
    if extra_weight_attrs.get("weight_loader") == getattr(layer, "weight_loader_fused", None):
        layer.w2_weight_scale.weight_loader = _copy_whole


def _copy_whole(param, loaded_weight, *args, **kwargs):
    """One scale per output row of the down projection: the same on every TP rank."""
    if tuple(param.shape) != tuple(loaded_weight.shape):
        raise ValueError(f"kunlun-triton: w2_weight_scale {tuple(loaded_weight.shape)} in the checkpoint, "
                         f"{tuple(param.shape)} expected (per expert and output row)")  # fmt: skip
    param.data.copy_(loaded_weight)
