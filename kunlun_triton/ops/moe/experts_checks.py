"""`fused_experts`' checked mode: the shapes, dtypes and devices of a call,
per weight format (float, W8A8-INT8, MXFP4) and with gpt-oss's options
(expert biases, clamped SwiGLU), each error naming the op and the argument."""

from __future__ import annotations

import torch

from ...runtime.dtypes import FLOAT_DTYPES, INDEX_DTYPES
from ..validation import require_choice, require_number, require_same, require_same_device, require_tensor
from .mxfp4 import MXFP4_BLOCK

OP = "fused_experts"
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")  # SGLang's names; "gelu" is exact (erf), as its Triton runner
FORMULATIONS = ("dot", "sum")
WEIGHT_FORMATS = ("float", "int8", "mxfp4")
MAX_TOP_K = 32
MAX_EXPERTS = 1024


def validate(x, w13, w2, topk_weights, topk_ids, activation, formulation, weights="float"):
    """(tokens, hidden, experts, inter, top_k) of a checked call. MXFP4: w13
    uint8 [E, 2I, H / 2] (or gpt-oss's [E, 2I, H / 32, 16]), w2 [E, H, I / 2]."""
    require_tensor(OP, "hidden_states", x, ndim=2)
    weight_dtypes = {"float": FLOAT_DTYPES, "int8": (torch.int8,), "mxfp4": (torch.uint8,)}[weights]
    require_tensor(OP, "w13", w13, dtypes=weight_dtypes, min_ndim=3, max_ndim=4 if weights == "mxfp4" else 3)
    require_tensor(OP, "w2", w2, dtypes=weight_dtypes, min_ndim=3, max_ndim=4 if weights == "mxfp4" else 3)
    require_tensor(OP, "topk_weights", topk_weights, ndim=2)
    require_tensor(OP, "topk_ids", topk_ids, dtypes=INDEX_DTYPES, ndim=2)
    require_choice(OP, "activation", activation, ACTIVATIONS)
    if formulation is not None:
        require_choice(OP, "formulation", formulation, FORMULATIONS)
    tokens, hidden = x.shape
    experts, two_inter = w13.shape[0], w13.shape[1]
    if two_inter % 2 or two_inter == 0:
        raise ValueError(f"{OP}: w13 must hold gate and up rows [E, 2I, H], got shape {tuple(w13.shape)}")
    inter = two_inter // 2
    if weights == "mxfp4":
        if hidden % MXFP4_BLOCK or inter % MXFP4_BLOCK:
            raise ValueError(f"{OP}: MXFP4 experts need the hidden size ({hidden}) and I ({inter}) to be multiples "
                             f"of {MXFP4_BLOCK}")  # fmt: skip
        for name, t, shape in (("w13", w13, (experts, 2 * inter, hidden // 2)), ("w2", w2, (experts, hidden, inter // 2))):
            if (t.flatten(2) if t.dim() == 4 else t).shape != shape or not t.is_contiguous():
                raise ValueError(f"{OP}: MXFP4 {name} must be contiguous packed nibbles {list(shape)} (or "
                                 f"[{shape[0]}, {shape[1]}, {shape[2] // 16}, 16]), got {tuple(t.shape)}")  # fmt: skip
    else:
        require_same(OP, "w13's shape and (E, 2I, hidden size)", w13=tuple(w13.shape),
                     expected=(experts, 2 * inter, hidden))  # fmt: skip
        require_same(OP, "w2's shape and (E, hidden size, I)", w2=tuple(w2.shape), expected=(experts, hidden, inter))
    if weights == "float":
        require_same(OP, "dtypes of hidden_states and the expert weights", hidden_states=x.dtype, w13=w13.dtype,
                     w2=w2.dtype)  # fmt: skip
    require_same(OP, "shapes of topk_weights and topk_ids", topk_weights=tuple(topk_weights.shape),
                 topk_ids=tuple(topk_ids.shape))  # fmt: skip
    top_k = topk_ids.shape[1]
    if topk_ids.shape[0] != tokens:
        raise ValueError(f"{OP}: topk_ids has {topk_ids.shape[0]} rows but hidden_states has {tokens} tokens")
    if not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"{OP}: topk_ids must have 1..{MAX_TOP_K} columns (K), got {top_k}")
    if not 1 <= experts <= MAX_EXPERTS:
        raise ValueError(f"{OP}: w13 must hold 1..{MAX_EXPERTS} experts, got {experts}")
    require_same_device(OP, hidden_states=x, w13=w13, w2=w2, topk_weights=topk_weights, topk_ids=topk_ids)
    return tokens, hidden, experts, inter, top_k


def validate_scales(w13_scale, w2_scale, experts, hidden, inter, weights):
    """int8: per-output-channel fp32 scales, [E, 2I, 1] and [E, H, 1] (SGLang's
    W8A8Int8MoEMethod) or without the trailing 1; MXFP4: e8m0 uint8 [E, 2I,
    H / 32] and [E, H, I / 32] (SGLang's Mxfp4MoEMethod). Contiguous."""
    for name, t, rows, k in (("w13_scale", w13_scale, 2 * inter, hidden), ("w2_scale", w2_scale, hidden, inter)):
        if weights == "int8":
            if t is None:
                raise ValueError(f"{OP}: {name} is None; use_int8_w8a8 needs per-output-channel fp32 scales")
            require_tensor(OP, name, t, dtypes=(torch.float32,), min_ndim=2, max_ndim=3)
            if tuple(t.shape[:2]) != (experts, rows) or t.numel() != experts * rows or not t.is_contiguous():
                raise ValueError(f"{OP}: {name} must be a contiguous fp32 [{experts}, {rows}, 1] tensor, got shape "
                                 f"{tuple(t.shape)} with strides {t.stride()}")  # fmt: skip
        else:
            if t is None:
                raise ValueError(f"{OP}: {name} is None; use_mxfp4_w4a16 needs the e8m0 scales (uint8)")
            require_tensor(OP, name, t, dtypes=(torch.uint8,), ndim=3)
            if tuple(t.shape) != (experts, rows, k // MXFP4_BLOCK) or not t.is_contiguous():
                raise ValueError(f"{OP}: {name} must be contiguous e8m0 [{experts}, {rows}, {k // MXFP4_BLOCK}], got "
                                 f"shape {tuple(t.shape)} with strides {t.stride()}")  # fmt: skip


def validate_gemm1(activation, gemm1_alpha, gemm1_limit, b1, b2, x, experts, hidden, inter):
    """gpt-oss's options: biases b1 [E, 2I] and b2 [E, H] (float, contiguous,
    on x's device); gemm1_alpha needs gemm1_limit (SGLang asserts it), both
    need the gated silu (SGLang applies them there only)."""
    if (gemm1_alpha is not None or gemm1_limit is not None) and activation != "silu":
        raise ValueError(f"{OP}: gemm1_alpha / gemm1_limit clamp SGLang's gated silu; got activation={activation!r}")
    if gemm1_alpha is not None:
        if gemm1_limit is None:
            raise ValueError(f"{OP}: gemm1_alpha needs gemm1_limit (gpt-oss's clamped SwiGLU)")
        require_number(OP, "gemm1_alpha", gemm1_alpha)
    if gemm1_limit is not None:
        require_number(OP, "gemm1_limit", gemm1_limit, above=0.0)
    for name, t, shape in (("b1", b1, (experts, 2 * inter)), ("b2", b2, (experts, hidden))):
        if t is not None:
            require_tensor(OP, name, t, ndim=2)
            if tuple(t.shape) != shape or not t.is_contiguous():
                raise ValueError(f"{OP}: {name} must be a contiguous {list(shape)} tensor, got shape {tuple(t.shape)} "
                                 f"with strides {t.stride()}")  # fmt: skip
    require_same_device(OP, hidden_states=x, b1=b1, b2=b2)


def check_ids(topk_ids, experts):
    lo, hi = torch.aminmax(topk_ids)
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi >= experts:
        raise ValueError(f"{OP}: topk_ids holds expert id {lo if lo < 0 else hi}, outside [0, {experts})")
