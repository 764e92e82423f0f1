"""``kunlun-triton convert-weights --quantize w8a8-int8``: SGLang's
``w8a8_int8`` checkpoint from a bf16/fp16/fp32 one.

SGLang 0.5.23's format (``srt/layers/quantization/w8a8_int8.py``): every
linear layer of the decoder blocks (attention q/k/v/o, the MLP's
gate/up/down, MoE experts) stores ``<name>.weight`` int8 [out, in] and
``<name>.weight_scale`` fp32 [out, 1], symmetric per output channel:

    scale[o] = max(max_i |W[o, i]|, 1e-10) / 127
    q[o, i]  = round_half_even(W[o, i] * (127 / max_i |W[o, i]|))

(the same definition as the activations' `per_token_quant_int8`, so |q| <=
127). gpt-oss's fused experts (``mlp.experts.gate_up_proj`` [E, in, out] and
``down_proj``, HF's layout, gate/up interleaved) are quantized per expert and
output column: int8 in the same layout and ``<name>_scale`` fp32 [E, 1, out],
which SGLang's gpt-oss loader maps onto ``w13_weight_scale`` /
``w2_weight_scale`` through the same transpose as the weights (its bias
parameters are the platform's: `sglang_plugin.layers.quantization`); its
other linear layers keep their floats, because SGLang builds gpt-oss's
attention without a quant config (as gpt-oss's own checkpoints quantize
only the experts). Norms, embeddings, the LM head and MoE routers (SGLang builds those
with no quant config) keep their floats, cast to ``--dtype``. config.json
gains ``quantization_config: {"quant_method": "w8a8_int8", ...}``, which
SGLang reads to pick the method (``--quantization w8a8_int8`` matches it);
an index gets the scale tensors' entries. Everything else (containment,
atomicity, validation before writing) is `convert_weights`'s.

A source that is already quantized (`quantized_format`: a
``quantization_config`` in config.json, or integer / fp8 weights next to
``*_scale`` tensors) is refused by ``--quantize`` naming what was found;
without ``--quantize`` its quantized weights and its scales are copied with
their dtypes unchanged (a scale cast to fp16 loses precision and is not what
the format's loader expects).
"""

from __future__ import annotations

import torch

from .checkpoint_files import ConvertError

METHODS = ("w8a8-int8",)
# Linear layers SGLang builds without a quant config (MoE routers) keep their floats.
FLOAT_LINEARS = ("gate", "router", "shared_expert_gate")
FLOAT_PARTS = ("norm", "embed", "lm_head", "rotary")
FUSED_EXPERTS = ("experts.gate_up_proj", "experts.down_proj")  # gpt-oss: [E, in, out]
EXPERTS_ONLY = ("GptOssForCausalLM",)  # SGLang builds their other linear layers unquantized


def quantize_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 [out, in], fp32 scale [out, 1]): per-output-channel symmetric int8."""
    from ..ops.quant.reference import per_token_quant_int8

    return per_token_quant_int8(w.float())


class W8A8Int8:
    """What ``--quantize w8a8-int8`` changes in a conversion."""

    method = "w8a8_int8"

    def __init__(self, config: dict | None = None):
        self.added: dict[str, str] = {}  # scale tensor -> its shard
        self.quantized = 0
        self.experts_only = bool(set((config or {}).get("architectures") or ()) & set(EXPERTS_ONLY))

    def owns(self, name: str, t: torch.Tensor) -> bool:
        """A decoder block's linear weight: 2-D float ``...layers.N....<proj>.weight``,
        or gpt-oss's fused experts (3-D float ``...mlp.experts.gate_up_proj``)."""
        if t.dim() == 3 and t.dtype.is_floating_point and name.endswith(FUSED_EXPERTS):
            return True
        if self.experts_only or t.dim() != 2 or not t.dtype.is_floating_point or not name.endswith(".weight"):
            return False
        parts = name.split(".")
        if "layers" not in parts and "h" not in parts:
            return False
        return parts[-2] not in FLOAT_LINEARS and not any(p in name for p in FLOAT_PARTS)

    def quantize(self, shard: str, name: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
        if t.dim() == 3:  # [E, in, out]: one scale per expert and output column
            q, scale = quantize_per_channel(t.transpose(1, 2).reshape(-1, t.shape[1]))
            q = q.view(t.shape[0], t.shape[2], t.shape[1]).transpose(1, 2)
            scale = scale.view(t.shape[0], 1, t.shape[2])
        else:
            q, scale = quantize_per_channel(t)
        self.added[name + "_scale"] = shard
        self.quantized += 1
        return {name: q.contiguous(), name + "_scale": scale.contiguous()}

    def update_config(self, config: dict) -> dict:
        return {**config, "quantization_config": {"quant_method": self.method, "is_dynamic": True, "ignore": []}}

    def update_index(self, index: dict) -> dict:
        return {**index, "weight_map": {**index["weight_map"], **self.added}}


SCALE_SUFFIXES = ("_scale", "_scale_inv", "_scales", ".scales", "_zero_point", ".qzeros")
QUANTIZED_DTYPES = (torch.int8, torch.uint8, torch.int32, torch.float8_e4m3fn, torch.float8_e5m2)


def is_quantization_tensor(name: str) -> bool:
    """A scale (or zero point) of a quantized checkpoint: kept as it is by any conversion."""
    return name.endswith(SCALE_SUFFIXES)


def quantized_format(config: dict | None, tensors: dict) -> str | None:
    """What quantization a source checkpoint already has, in words, or None.
    `tensors`: name -> dtype (of every tensor, read from the headers)."""
    quant = (config or {}).get("quantization_config")
    if isinstance(quant, dict) and quant:
        return f"quantization_config.quant_method {quant.get('quant_method', '(none given)')!r}"
    scales = [n for n in tensors if is_quantization_tensor(n)]
    low = sorted({str(d).replace("torch.", "") for n, d in tensors.items() if d in QUANTIZED_DTYPES
                  and n.endswith(".weight")})  # fmt: skip
    if scales and low:
        return f"{'/'.join(low)} weights with {len(scales)} scale tensors (e.g. {scales[0]})"
    return None


def quantizer(method: str | None, config: dict | None = None):
    """The quantizer of `method` for a checkpoint with `config` (config.json), or None."""
    if method is None:
        return None
    if method not in METHODS:
        raise ConvertError(f"--quantize {method!r}: expected one of {', '.join(METHODS)}")
    return W8A8Int8(config)
