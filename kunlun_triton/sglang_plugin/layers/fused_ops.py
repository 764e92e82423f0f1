"""Fused-op forwards (RMSNorm, SiLU/GELU-and-mul, rotary) routed to our ops.

SGLang 0.5.23's ``BaseFusedOp`` looks up, on an out-of-tree platform, the
forward registered for the op's EXACT class under the platform's dispatch key
(``kunlun``), then a ``forward_kunlun`` method, then ``forward_native``. So
each class is registered on its own, and only where our op computes what that
class's ``forward_native`` computes:

- ``RMSNorm`` (plain and with the fused residual add); the variants with
  extra behaviour (``post_residual_addition``, fp32 residual, partial variance,
  cast-before-multiply) fall back to native per call; the FP8 input-quant
  fusion hint (``quant_linear``) is ignored, as ``forward_native`` does.
  ``GemmaRMSNorm`` (``1 + weight``) and friends are different classes and stay
  native.
- ``SiluAndMul``, ``GeluAndMul`` (approximate "none" or "tanh").
- ``RotaryEmbedding`` and every subclass that keeps the base
  ``forward_native`` (those differ only in how ``cos_sin_cache`` is built:
  linear / dynamic NTK / YaRN / Llama-3 scaling, ...), and DeepSeek's YaRN
  (``DeepseekScalingRotaryEmbedding``: its own ``forward_native`` computes
  the base formula over a cache with YaRN's mscale folded in, on the rope
  slices of q and of the latent, strided views rotated in place). Other
  subclasses with their own forward (MRoPE, dual chunk, ...) stay on their
  own path.

Final-logit soft-capping is no fused op in SGLang: the logits processor calls
its own Triton ``softcap_inplace_logits`` (imported as ``fused_softcap``);
`softcap_logits` is the AROUND hook the install table puts on that name.
"""

from __future__ import annotations

import logging
import weakref

from ..platform.mode import dev_mode

logger = logging.getLogger("kunlun_triton.sglang_plugin")



def _checks() -> bool:
    """Input checks on the serving path only in development mode: SGLang's
    layers hand these ops well-formed tensors (shapes fixed by the model)."""
    return dev_mode()


def _rms_norm_forward(self, x, residual=None, post_residual_addition=None, quant_linear=None):
    from kunlun_triton import ops

    # quant_linear / fuse_input_quant only let CUDA fuse a downstream FP8
    # quantisation; forward_native ignores it and so do we.
    if (
        post_residual_addition is not None
        or x.numel() == 0
        or self.variance_size_override is not None
        or self.fp32_residual
        or self.cast_x_before_out_mul
        or self.override_orig_dtype is not None
        or x.shape[-1] != self.hidden_size
        or (residual is not None and (residual.dtype != x.dtype or residual.shape != x.shape))
    ):
        return self.forward_native(x, residual, post_residual_addition)
    weight = self.weight.data if hasattr(self.weight, "data") else self.weight
    if weight.device != x.device:
        weight = weight.to(x.device)
    check = _checks()
    if residual is None:
        return ops.rms_norm(x, weight, self.variance_epsilon, check=check)
    if not residual.is_contiguous():
        residual = residual.contiguous()
    out = ops.fused_add_rms_norm(x, residual, weight, self.variance_epsilon, check=check)
    return out, residual


def elementwise_forward(op):
    """The forward of a layer whose whole job is ``y = op(x)`` (SiluAndMul):
    what an elementwise op's spec gets by naming the layer in
    `OpSpec.sglang_forward`, with no code here."""

    def forward(self, x):
        return op(x, check=_checks())

    forward.__name__ = forward.__qualname__ = f"{op.__name__}_forward"
    return forward


# Where SGLang defines the layers an elementwise op's spec may name.
ELEMENTWISE_LAYER_MODULES = ("sglang.srt.layers.activation",)


def _elementwise_layer(name: str):
    import importlib

    for module in ELEMENTWISE_LAYER_MODULES:
        cls = getattr(importlib.import_module(module), name, None)
        if isinstance(cls, type):
            return cls
    return None


def _gelu_and_mul_forward(self, x):
    from kunlun_triton import ops

    if self.approximate not in ("none", "tanh"):
        return self.forward_native(x)
    return ops.gelu_and_mul(x, approximate=self.approximate, check=_checks())


# layer -> (the cos_sin_cache it had, {(dtype, device): that cache cast and moved}):
# the rotary forward runs per layer and step, the cast once per dtype and device
# (a whole cache is 6 MB at 8k positions and 100 MB at 128k). A layer that
# rebuilds its cache (dynamic NTK) gets a fresh entry.
_cast_caches: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def rotary_cache_for(layer, dtype, device):
    """`layer.cos_sin_cache` in `dtype` on `device`, converted once."""
    source = layer.cos_sin_cache
    held = _cast_caches.get(layer)
    if held is None or held[0] is not source:
        held = _cast_caches[layer] = (source, {})
    key = (dtype, device)
    cache = held[1].get(key)
    if cache is None:
        cache = held[1][key] = source.to(device=device, dtype=dtype)
    return cache


def _rotary_forward(self, positions, query, key, offsets=None, fused_set_kv_buffer_arg=None):
    from kunlun_triton import ops

    if (
        fused_set_kv_buffer_arg is not None
        or hasattr(self, "sin_cos_cache")
        or key is None
        or positions.dim() != 1
        or self.cos_sin_cache.shape[-1] != self.rotary_dim
    ):
        return self.forward_native(positions, query, key, offsets, fused_set_kv_buffer_arg)
    if offsets is not None:
        positions = positions + offsets
    cache = rotary_cache_for(self, query.dtype, query.device)
    check = dev_mode()
    ops.rotary_embedding(positions, query, key, self.head_size, cache, bool(self.is_neox_style),
                         check_positions=check, check=check)  # fmt: skip
    return query, key


def softcap_logits(original, full_logits, final_logit_softcapping):
    """AROUND hook on the logits processor's ``fused_softcap`` (SGLang's
    ``softcap_inplace_logits``): in place, our ``logit_softcap``."""
    from kunlun_triton import ops

    if full_logits.dim() == 0 or full_logits.stride(-1) != 1 or not full_logits.is_floating_point():
        return original(full_logits, final_logit_softcapping)
    return ops.logit_softcap(full_logits, final_logit_softcapping, check=dev_mode())


def _deepseek_rotary_forward(self, positions, query, key, offsets=None):
    """DeepseekScalingRotaryEmbedding: q_pe [tokens, heads, rope] and k_pe
    [tokens, 1, rope], views into q and the latent, rotated in place."""
    from kunlun_triton import ops

    if (
        key is None
        or positions.dim() != 1
        or self.rotary_dim != self.head_size
        or self.cos_sin_cache.shape[-1] != self.rotary_dim
        or query.shape[-1] != self.head_size
        or key.shape[-1] != self.head_size
    ):
        return self.forward_native(positions, query, key, offsets)
    if offsets is not None:
        positions = positions + offsets
    cache = rotary_cache_for(self, query.dtype, query.device)
    check = dev_mode()
    ops.rotary_embedding(positions, query, key, self.head_size, cache, bool(self.is_neox_style),
                         check_positions=check, check=check)  # fmt: skip
    return query, key


def _rotary_classes():
    """RotaryEmbedding and the subclasses whose forward is the base one."""
    import sglang.srt.layers.rotary_embedding as rope_pkg  # noqa: F401 (defines the subclasses)
    from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding

    keep = ("forward", "forward_native", "_apply_rotary_emb_wrapped", "get_cos_sin_with_position")
    seen, todo, out = set(), [RotaryEmbedding], []
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        if all(getattr(cls, name, None) is getattr(RotaryEmbedding, name, None) for name in keep):
            out.append(cls)
    return out


def register_fused_ops(dispatch_key: str) -> dict[type, str]:
    """Register our forwards under `dispatch_key` (the install table does, once);
    returns {class: op name}."""
    from sglang.kernels.fused_op import BaseFusedOp
    from sglang.srt.layers.activation import GeluAndMul
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.rotary_embedding.rope_variant import DeepseekScalingRotaryEmbedding

    from ...ops.spec import all_specs

    # our forward per SGLang layer with more to it than y = op(x), under the
    # name the specs give the layer (`OpSpec.sglang_forward`); any other layer
    # a spec names gets `elementwise_forward` of the spec's function
    forwards = {"RMSNorm": [(RMSNorm, _rms_norm_forward)], "GeluAndMul": [(GeluAndMul, _gelu_and_mul_forward)],
                "RotaryEmbedding(+subclasses)": [(cls, _rotary_forward) for cls in _rotary_classes()]
                + [(DeepseekScalingRotaryEmbedding, _deepseek_rotary_forward)]}  # fmt: skip
    table, served = [], set()  # (class, forward, op): a layer serving several ops (RMSNorm) under its first
    for name, spec in all_specs().items():
        layer_name = spec.sglang_forward
        if not layer_name or layer_name in served:
            continue
        served.add(layer_name)
        if layer_name not in forwards:
            layer = _elementwise_layer(spec.sglang_forward)
            if layer is None:
                raise LookupError(f"{name}: its spec names the SGLang layer {spec.sglang_forward!r}, found neither "
                                  f"in {', '.join(ELEMENTWISE_LAYER_MODULES)} nor with a forward here")  # fmt: skip
            forwards[layer_name] = [(layer, elementwise_forward(spec.function))]
        table += [(cls, fn, name) for cls, fn in forwards[layer_name]]
    for cls, fn, _ in table:
        BaseFusedOp.register_oot_forward(cls, fn, dispatch_key)
    logger.debug("kunlun-triton fused ops registered under %r: %s", dispatch_key,
                 ", ".join(sorted(cls.__name__ for cls, _, _ in table)))  # fmt: skip
    return {cls: name for cls, _, name in table}
