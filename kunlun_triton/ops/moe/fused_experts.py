"""`fused_experts`: the routed experts of a mixture-of-experts layer.

For token t and its K choices (expert e = ids[t, k], weight w = weights[t, k]):

    [gate; up] = W13[e] @ x[t]                 (W13 [E, 2I, H]: gate rows, then up rows)
    h          = act(gate) * up                (rounded to x's dtype: SGLang's intermediate cache)
    out[t]     = sum_k  w * (W2[e] @ h)        (W2 [E, H, I])

Launches (T x K = n routing slots):

1. alignment (`align`): the slots sorted by expert into BLOCK_M-row blocks
   and a block table, without atomics: one launch up to 256 slots, three
   beyond;
2. `moe_gate_up_kernel`, grid (blocks, I / BLOCK_N): a block's rows gather
   their tokens' x rows, multiply by the block's expert's gate and up tiles
   (two fp32 accumulators), and store act(gate) * up in sorted row order;
3. `moe_down_kernel`, grid (blocks, H / BLOCK_N): those rows times W2[e],
   times the routing weight, stored per slot (or straight into the output
   when K = 1 and every id names an expert);
4. `moe_sum_kernel` (K > 1, or ``ids_may_be_invalid``): out[t] = sum over
   t's K slots whose id is in [0, E), in fp32.

Ids outside [0, E) (expert parallelism's -1) get no row from alignment, so
only the sum writes their tokens; K = 1 skips it, so a caller passing such
ids says so (``ids_may_be_invalid``) and K = 1 sums too (no cost otherwise).

A decode (one alignment launch, float experts) launches them as one
`LaunchSequence`: one key over the 21 arguments they pick from instead of
four over 33, one launch-environment check (docs/decode-occupancy.md).

Besides the output (or `out`, which may be the input: SGLang's inplace) a
call allocates twice: the int32 index (block table, then sorted slots) and
one scratch in x's dtype (the activations, then the slot outputs at an
aligned offset); the kernels take offsets instead of host-side slices.

W8A8-INT8 experts (``use_int8_w8a8``, SGLang's W8A8Int8MoEMethod): x is
quantized per token and the activation rows per row (`per_token_quant_int8`,
two more launches), W13/W2 stay int8 with per-channel fp32 scales, and both
GEMMs accumulate exactly in int32 (`quant.kernels.int8_tile_product`,
constexpr ``W8A8``; the float path's code is unchanged), scaled by the
token's and the channel's scales after the loop.

The kernels (one expert per block, the tl.dot / tl.sum formulations, ragged
tiles): `expert_kernels`; the launch plan and the slots' alignment:
`experts_plan`.
"""

from __future__ import annotations

import torch

from ...runtime import use_triton
from ..quant.ops import per_token_quant_int8
from ..validation import checked_mode, require_same, require_same_device, require_tensor
from . import align, reference
from .experts_checks import OP, check_ids, validate, validate_gemm1, validate_scales
from .experts_plan import PLAIN, align_slots, blocks_bound, expert_plan, gemm1_options


def fused_experts(
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    out: torch.Tensor | None = None,
    check: bool = True,
    formulation: str | None = None,
    config: dict | None = None,
    use_int8_w8a8: bool = False,
    use_mxfp4_w4a16: bool = False,
    w13_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    gemm1_alpha: float | None = None,
    gemm1_limit: float | None = None,
    gate_up_interleaved: bool | None = None,
    ids_may_be_invalid: bool = False,
) -> torch.Tensor:
    """The routed experts' output [T, H] in hidden_states' dtype (see the module doc).

    ``use_int8_w8a8`` (SGLang's W8A8Int8MoEMethod): w13 and w2 are int8 with
    per-output-channel fp32 scales `w13_scale` [E, 2I, 1] and `w2_scale`
    [E, H, 1]; x and the activation rows are quantized per token
    (`per_token_quant_int8`) and each GEMM accumulates exactly in int32,
    scaled by the token's and the channel's scales after its loop.

    ``use_mxfp4_w4a16`` (gpt-oss's checkpoints, SGLang's Mxfp4MoEMethod
    layout): w13 uint8 [E, 2I, H / 2] and w2 [E, H, I / 2] packed e2m1
    (or the checkpoint's [..., K / 32, 16] blocks), `w13_scale` /
    `w2_scale` their e8m0 scales uint8 [E, 2I, H / 32] / [E, H, I / 32];
    x stays in its float dtype, the weights are decoded in the GEMM loops
    (`mxfp4`). H and I multiples of 32.

    gpt-oss's options, SGLang's names: `b1` [E, 2I] and `b2` [E, H] expert
    biases, added after the GEMM (and its scales), before the routing
    weight; `gemm1_alpha` with `gemm1_limit`: the clamped SwiGLU
    min(g, limit) sigmoid(alpha min(g, limit)) (clamp(u, -limit, limit) + 1);
    `gemm1_limit` alone: min(silu(g), limit) clamp(u, -limit, limit);
    `gate_up_interleaved`: W13's gate and up rows alternate (2c, 2c + 1)
    instead of [gate; up] (None: SGLang's default, interleaved when
    gemm1_alpha is given).

    hidden_states [T, H] (rows may be strided); w13 [E, 2I, H] (gate rows,
    then up rows: SGLang's layout) and w2 [E, H, I], in hidden_states'
    dtype; topk_weights [T, K] (any float dtype) and topk_ids [T, K] (int32
    or int64) as `moe_topk` returns them. `activation`: "silu", "gelu" (exact, erf) or
    "gelu_tanh". With `apply_router_weight_on_input` the weight scales the
    input of W13 instead of the output of W2. Checked mode (`check`,
    ``KUNLUN_TRITON_CHECK``) validates shapes, dtypes and devices and
    rejects ids outside [0, E) (a sync) unless ``ids_may_be_invalid``;
    unchecked, the launcher reads only the sizes it launches with (a wrong
    shape reads unrelated memory). ``ids_may_be_invalid`` (expert
    parallelism's -1): such ids contribute exactly zero whatever K; without
    it only for K > 1 (K = 1 leaves the token's row as it was). `formulation`
    ("dot" | "sum") overrides the config's. `out` [T, H] (rows may be
    strided) receives the result instead of a new tensor; it may be
    hidden_states itself (SGLang's ``inplace``: the input is read in full
    before the output is written), no other tensor of the call.
    """
    weights_format = "int8" if use_int8_w8a8 else "mxfp4" if use_mxfp4_w4a16 else "float"
    if use_int8_w8a8 and use_mxfp4_w4a16:
        raise ValueError(f"{OP}: use_int8_w8a8 and use_mxfp4_w4a16 exclude each other")
    if checked_mode(check):
        tokens, hidden, experts, inter, top_k = validate(hidden_states, w13, w2, topk_weights, topk_ids, activation,
                                                         formulation, weights_format)  # fmt: skip
        if weights_format != "float":
            validate_scales(w13_scale, w2_scale, experts, hidden, inter, weights_format)
            require_same_device(OP, hidden_states=hidden_states, w13_scale=w13_scale, w2_scale=w2_scale)
        validate_gemm1(activation, gemm1_alpha, gemm1_limit, b1, b2, hidden_states, experts, hidden, inter)
        if out is not None:
            require_tensor(OP, "out", out, ndim=2)
            require_same(OP, "shapes of out and hidden_states", out=tuple(out.shape),
                         hidden_states=tuple(hidden_states.shape))  # fmt: skip
            require_same(OP, "dtypes of out and hidden_states", out=out.dtype, hidden_states=hidden_states.dtype)
            require_same_device(OP, hidden_states=hidden_states, out=out)
        if tokens and not ids_may_be_invalid:
            check_ids(topk_ids, experts)
        tensors = (hidden_states, w13, w2, topk_weights, topk_ids)
    else:  # the launch's sizes only: the shapes and devices are the caller's promise
        (tokens, hidden), experts, top_k = hidden_states.shape, w13.shape[0], topk_ids.shape[1]
        inter = w13.shape[1] // 2
        tensors = (hidden_states,)
    if out is None:
        out = hidden_states.new_empty(tokens, hidden)
    if tokens == 0:
        return out
    if use_mxfp4_w4a16 and w13.dim() == 4:  # gpt-oss's [E, N, K / 32, 16] blocks
        w13, w2 = w13.flatten(2), w2.flatten(2)
    gemm1 = gemm1_options(activation, gemm1_alpha, gemm1_limit, gate_up_interleaved, b1, b2)
    if not use_triton(OP, *tensors):
        quant = dict(w13_scale=w13_scale, w2_scale=w2_scale, use_int8_w8a8=use_int8_w8a8,
                     use_mxfp4_w4a16=use_mxfp4_w4a16) if weights_format != "float" else {}  # fmt: skip
        return out.copy_(reference.fused_experts(hidden_states, w13, w2, topk_weights, topk_ids, activation=activation,
                                                 apply_router_weight_on_input=apply_router_weight_on_input, b1=b1,
                                                 b2=b2, gemm1_alpha=gemm1_alpha, gemm1_limit=gemm1_limit,
                                                 gate_up_interleaved=gemm1.interleaved, **quant))  # fmt: skip
    summed = top_k > 1 or bool(ids_may_be_invalid)
    args = (1 << (tokens - 1).bit_length(), experts, top_k, hidden, inter, hidden_states.dtype, activation,
            bool(apply_router_weight_on_input), formulation, weights_format, gemm1 if gemm1 != PLAIN.get(activation)
            else None, summed)  # fmt: skip
    plan = expert_plan(*args) if config is None else expert_plan.uncached(*args, config)
    ids = topk_ids if topk_ids.is_contiguous() else topk_ids.contiguous()
    weights = topk_weights if topk_weights.is_contiguous() else topk_weights.contiguous()
    n = tokens * top_k
    # One scratch allocation: the sorted rows' act(gate) * up [n, I], then
    # (summed) the slot outputs [n, H] from a 64-element boundary (aligned
    # whatever n: Triton specialises the offset on its 16-divisibility).
    inter_size = -(-n * inter // 64) * 64
    scratch = hidden_states.new_empty(inter_size + n * hidden if summed else n * inter)
    int8 = weights_format == "int8"
    if n <= align.SINGLE_PROGRAM_SLOTS and not int8:  # a decode: its launches as one sequence
        bound = blocks_bound(n, experts, plan.block_m)
        index = ids.new_empty(3 * bound + n, dtype=torch.int32)
        down_out, down_offset, down_stride = (scratch, inter_size, hidden) if summed else (out, 0, out.stride(0))
        plan.decode((ids, index, n, bound, hidden_states, w13, scratch, weights, hidden_states.stride(0),
                     *w13.stride()[:2], None, w2, down_out, down_offset, *w2.stride()[:2], down_stride, out, tokens,
                     out.stride(0), *((w13_scale, w2_scale, b1, b2) if plan.extended else ())),
                    ((1, 1, 1), (bound, plan.gate_up_tiles, 1), (bound, plan.down_tiles, 1),
                     (-(-tokens // plan.sum_rows), plan.sum_cols, 1))[: 3 + summed])  # fmt: skip
        return out
    x, x_scale = per_token_quant_int8(hidden_states, check=False) if int8 else (hidden_states, None)
    index, bound = align_slots(ids, experts, plan)
    plan.gate_up((bound, plan.gate_up_tiles),
        x, w13, scratch, index, bound, weights, x.stride(0), *w13.stride()[:2], x_scale, w13_scale, b1)  # fmt: skip
    # W8A8: the activation rows quantized per row (SGLang's intermediate cache quantized per token)
    inter_rows, inter_scale = per_token_quant_int8(scratch[: n * inter].view(n, inter), check=False) if int8 \
        else (scratch, None)  # fmt: skip
    if not summed:
        plan.down((bound, plan.down_tiles),
            inter_rows, w2, out, 0, index, bound, weights, *w2.stride()[:2], out.stride(0), inter_scale, w2_scale, b2)  # fmt: skip
        return out
    plan.down((bound, plan.down_tiles),
        inter_rows, w2, scratch, inter_size, index, bound, weights, *w2.stride()[:2], hidden, inter_scale, w2_scale,
        b2)  # fmt: skip
    plan.sum((-(-tokens // plan.sum_rows), plan.sum_cols), scratch, inter_size, ids, out, tokens, out.stride(0))
    return out
