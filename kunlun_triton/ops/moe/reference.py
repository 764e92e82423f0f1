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


def _activation(gate: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "silu":
        return F.silu(gate)
    return F.gelu(gate, approximate="tanh" if activation == "gelu_tanh" else "none")


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
    w13_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """out[t] = sum_k w[t,k] * W2[e] @ (act(gate) * up), [gate; up] = W13[e] @ x[t], e = ids[t,k].

    Ids outside [0, E) contribute nothing (the op rejects them in checked
    mode). With `apply_router_weight_on_input` the weight scales x[t] before
    W13 instead of the expert's output.

    ``use_int8_w8a8``: int8 W13/W2 with per-output-channel scales; x and the
    activation rows quantized per token (`quant.reference`), each product
    exact (int64), then times the token's and the channel's scales in fp32
    (and the weight on input after them: the scales are per row, so
    quantizing w x gives the same codes).
    """
    if use_int8_w8a8:
        return _fused_experts_int8(hidden_states, w13, w2, topk_weights, topk_ids, activation,
                                   apply_router_weight_on_input, w13_scale, w2_scale)  # fmt: skip
    tokens, hidden = hidden_states.shape
    num_experts, inter = w13.shape[0], w13.shape[1] // 2
    dtype = hidden_states.dtype
    out = torch.zeros(tokens, hidden, dtype=torch.float32, device=hidden_states.device)
    x = hidden_states.float()
    ids = topk_ids.long()
    for expert in torch.unique(ids).tolist():
        if not 0 <= expert < num_experts:
            continue
        token_idx, slot_idx = torch.nonzero(ids == expert, as_tuple=True)
        weight = topk_weights[token_idx, slot_idx].float()[:, None]
        xe = x[token_idx] * weight if apply_router_weight_on_input else x[token_idx]
        gate_up = xe @ w13[expert].float().t()
        h = (_activation(gate_up[:, :inter], activation) * gate_up[:, inter:]).to(dtype).float()
        y = h @ w2[expert].float().t()
        if not apply_router_weight_on_input:
            y = y * weight
        out.index_add_(0, token_idx, y.to(dtype).float())
    return out.to(dtype)


def _fused_experts_int8(hidden_states, w13, w2, topk_weights, topk_ids, activation, on_input, w13_scale, w2_scale):
    from ..quant.reference import per_token_quant_int8

    tokens, hidden = hidden_states.shape
    num_experts, inter = w13.shape[0], w13.shape[1] // 2
    dtype = hidden_states.dtype
    out = torch.zeros(tokens, hidden, dtype=torch.float32, device=hidden_states.device)
    x_q, x_scale = per_token_quant_int8(hidden_states)
    s13, s2 = w13_scale.reshape(num_experts, -1).float(), w2_scale.reshape(num_experts, -1).float()
    ids = topk_ids.long()
    for expert in torch.unique(ids).tolist():
        if not 0 <= expert < num_experts:
            continue
        token_idx, slot_idx = torch.nonzero(ids == expert, as_tuple=True)
        weight = topk_weights[token_idx, slot_idx].float()[:, None]
        acc = (x_q[token_idx].long() @ w13[expert].long().t()).float()
        gate_up = acc * x_scale[token_idx] * s13[expert][None, :]
        if on_input:
            gate_up = gate_up * weight
        h = (_activation(gate_up[:, :inter], activation) * gate_up[:, inter:]).to(dtype)
        h_q, h_scale = per_token_quant_int8(h)
        y = (h_q.long() @ w2[expert].long().t()).float() * h_scale * s2[expert][None, :]
        if not on_input:
            y = y * weight
        out.index_add_(0, token_idx, y.to(dtype).float())
    return out.to(dtype)
