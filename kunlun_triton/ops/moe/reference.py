"""Pure-torch mixture-of-experts: the oracle for the kernels and the fallback path.

Written the plain way, one expert at a time, following SGLang 0.5.23's
semantics (``srt/layers/moe/topk.py`` for the routing,
``moe_runner/triton_utils/fused_moe.py`` for the experts):

- routing scores in fp32; the choice uses scores + correction_bias, the
  weights the scores; ties go to the lower expert id (a stable sort);
- experts: W13 [E, 2I, H] holds gate then up; each GEMM accumulates in fp32;
  the activation output is stored in the input dtype (SGLang's
  intermediate cache), each routed expert output too, and the sum over the
  K choices is fp32, rounded once to the input dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# SGLang's renormalisation epsilon (topk.py, _RENORMALIZE_SUM_EPSILON).
RENORMALIZE_EPSILON = 1e-20
# OCP MX e2m1 values by code (sign bit 8)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """MXFP4 weights to `dtype`, in the rows' own layout: blocks uint8
    [..., N, K / 2] (or gpt-oss's [..., N, K / 32, 16]), scales uint8
    [..., N, K / 32] -> [..., N, K], element k of a row being
    e2m1(nibble) * 2 ** (scale - 127) with element 2j in byte j's low nibble
    and 2j + 1 in its high one (`mxfp4` has the format; e8m0 255 is NaN).
    Plain torch, one leading index at a time (what convert-weights calls to
    write gpt-oss's experts as bf16 or W8A8-INT8)."""
    if blocks.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise TypeError(f"dequantize_mxfp4: blocks and scales must be uint8, got {blocks.dtype} and {scales.dtype}")
    if blocks.dim() == scales.dim() + 1:
        blocks = blocks.flatten(-2)
    if blocks.shape[:-1] != scales.shape[:-1] or blocks.shape[-1] != 16 * scales.shape[-1]:
        raise ValueError(f"dequantize_mxfp4: blocks {tuple(blocks.shape)} do not hold 32 elements per scale of "
                         f"{tuple(scales.shape)}")  # fmt: skip
    if blocks.dim() > 2:
        return torch.stack([dequantize_mxfp4(b, s, dtype) for b, s in zip(blocks, scales)])
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=blocks.device)
    values = torch.stack([table[(blocks & 15).long()], table[(blocks >> 4).long()]], dim=-1).flatten(-2)
    exponent = scales.long().repeat_interleave(32, dim=-1) - 127
    out = torch.ldexp(values, exponent.float())
    out = torch.where(exponent == 128, torch.nan, out)
    return out.to(dtype)


def _stable_topk_indices(values: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest along the last dim, ties to the lower index."""
    return torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :k]


def moe_topk(
    router_logits: torch.Tensor,
    top_k: int,
    *,
    renormalize: bool = True,
    scoring: str = "softmax",
    correction_bias: torch.Tensor | None = None,
    num_expert_group: int | None = None,
    topk_group: int | None = None,
    routed_scaling_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_weights fp32 [T, K], topk_ids int32 [T, K]), best choice first.

    scores = softmax(logits) or sigmoid(logits); choice = scores + bias.
    With groups (E split into num_expert_group equal groups), a group scores
    the sum of its top-2 choices when a bias is given, else its max; only
    the top `topk_group` groups' experts may be chosen. The weights are the
    chosen experts' scores, divided by their sum when `renormalize`, then
    multiplied by `routed_scaling_factor`.
    """
    logits = router_logits.float()
    tokens, experts = logits.shape
    if scoring == "topk_softmax":  # gpt-oss: the K largest logits, softmax over those K
        ids = _stable_topk_indices(logits, top_k)
        weights = logits.gather(1, ids).softmax(dim=-1)
        if routed_scaling_factor is not None:
            weights = weights * routed_scaling_factor
        return weights.float(), ids.to(torch.int32)
    scores = logits.softmax(dim=-1) if scoring == "softmax" else logits.sigmoid()
    choice = scores if correction_bias is None else scores + correction_bias.float()[None, :]
    if num_expert_group:
        grouped = choice.view(tokens, num_expert_group, experts // num_expert_group)
        if correction_bias is not None:
            group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        else:
            group_scores = grouped.max(dim=-1).values
        kept = _stable_topk_indices(group_scores, topk_group)
        group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)
        expert_mask = group_mask.repeat_interleave(experts // num_expert_group, dim=1)
        choice = choice.masked_fill(~expert_mask, float("-inf"))
    ids = _stable_topk_indices(choice, top_k)
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + RENORMALIZE_EPSILON)
    if routed_scaling_factor is not None:
        weights = weights * routed_scaling_factor
    return weights.float(), ids.to(torch.int32)


def _gated(gate_up: torch.Tensor, activation, gemm1_alpha, gemm1_limit, interleaved) -> torch.Tensor:
    """act(gate) * up of fp32 [rows, 2I] (SGLang's fused_moe.py: its gpt-oss
    swiglu with alpha and limit, its limit-only clamp, or act-and-mul)."""
    inter = gate_up.shape[1] // 2
    gate, up = (gate_up[:, 0::2], gate_up[:, 1::2]) if interleaved else (gate_up[:, :inter], gate_up[:, inter:])
    if gemm1_alpha is not None:
        gate = gate.clamp(max=gemm1_limit)
        return gate * torch.sigmoid(gemm1_alpha * gate) * (up.clamp(-gemm1_limit, gemm1_limit) + 1)
    if gemm1_limit is not None:
        return F.silu(gate).clamp(max=gemm1_limit) * up.clamp(-gemm1_limit, gemm1_limit)
    if activation == "silu":
        return F.silu(gate) * up
    return F.gelu(gate, approximate="tanh" if activation == "gelu_tanh" else "none") * up


def fused_experts(
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    use_int8_w8a8: bool = False,
    use_mxfp4_w4a16: bool = False,
    w13_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    gemm1_alpha: float | None = None,
    gemm1_limit: float | None = None,
    gate_up_interleaved: bool | None = None,
) -> torch.Tensor:
    """out[t] = sum_k w[t,k] * (W2[e] @ act(gate, up) + b2[e]), [gate; up] = W13[e] @ x[t] + b1[e], e = ids[t,k].

    Ids outside [0, E) contribute nothing (the op rejects them in checked
    mode). With `apply_router_weight_on_input` the weight scales W13's
    output (with its bias; = W13 @ (w x) without one) instead of W2's.

    ``use_int8_w8a8``: int8 W13/W2 with per-output-channel scales; x and the
    activation rows quantized per token (`quant.reference`), each product
    exact (int64), then times the token's and the channel's scales in fp32.
    ``use_mxfp4_w4a16``: the weights dequantized (`dequantize_mxfp4`) to
    x's dtype (exact in bf16), then as float experts. The gpt-oss options
    (b1, b2, gemm1_alpha, gemm1_limit, gate_up_interleaved) as the op's.
    """
    if use_mxfp4_w4a16:
        w13 = dequantize_mxfp4(w13, w13_scale, hidden_states.dtype)
        w2 = dequantize_mxfp4(w2, w2_scale, hidden_states.dtype)
    interleaved = gemm1_alpha is not None if gate_up_interleaved is None else gate_up_interleaved
    tokens, hidden = hidden_states.shape
    num_experts = w13.shape[0]
    dtype = hidden_states.dtype
    out = torch.zeros(tokens, hidden, dtype=torch.float32, device=hidden_states.device)
    if use_int8_w8a8:
        from ..quant.reference import per_token_quant_int8

        x, x_scale = per_token_quant_int8(hidden_states)
        s13, s2 = w13_scale.reshape(num_experts, -1).float(), w2_scale.reshape(num_experts, -1).float()
    else:
        x = hidden_states.float()
    ids = topk_ids.long()
    for expert in torch.unique(ids).tolist():
        if not 0 <= expert < num_experts:
            continue
        token_idx, slot_idx = torch.nonzero(ids == expert, as_tuple=True)
        weight = topk_weights[token_idx, slot_idx].float()[:, None]
        if use_int8_w8a8:
            gate_up = (x[token_idx].long() @ w13[expert].long().t()).float() * x_scale[token_idx] * s13[expert][None, :]
        else:
            gate_up = x[token_idx] @ w13[expert].float().t()
        if b1 is not None:
            gate_up = gate_up + b1[expert].float()[None, :]
        if apply_router_weight_on_input:
            gate_up = gate_up * weight
        h = _gated(gate_up, activation, gemm1_alpha, gemm1_limit, interleaved).to(dtype)
        if use_int8_w8a8:
            h_q, h_scale = per_token_quant_int8(h)
            y = (h_q.long() @ w2[expert].long().t()).float() * h_scale * s2[expert][None, :]
        else:
            y = h.float() @ w2[expert].float().t()
        if b2 is not None:
            y = y + b2[expert].float()[None, :]
        if not apply_router_weight_on_input:
            y = y * weight
        out.index_add_(0, token_idx, y.to(dtype).float())
    return out.to(dtype)
