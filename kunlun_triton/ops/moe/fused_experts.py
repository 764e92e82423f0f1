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
   when K = 1);
4. `moe_sum_kernel` (K > 1): out[t] = sum over t's K slots, in fp32.

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
tiles): `expert_kernels`.
"""

from __future__ import annotations

import operator

import torch
import triton

from ...runtime import capabilities, launch_options, plan_cache, use_triton
from ...runtime.dtypes import FLOAT_DTYPES, INDEX_DTYPES
from ..spec import explicit_config, lookup_config
from ..launch import KernelLaunch, LaunchSequence, constexpr_args, run_keywords
from ..validation import (
    checked_mode,
    power_of_two_at_most,
    require_choice,
    require_same,
    require_same_device,
    require_tensor,
)
from ..quant.ops import MAX_EXACT_BLOCK_K, per_token_quant_int8
from . import align, reference
from .expert_kernels import moe_down_kernel, moe_gate_up_kernel, moe_sum_kernel
from .tiles import dot_block

OP = "fused_experts"
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")  # SGLang's names; "gelu" is exact (erf), as its Triton runner
FORMULATIONS = ("dot", "sum")
MAX_TOP_K = 32
MAX_EXPERTS = 1024
SUM_TILE_CAP = 32768  # tl.sum formulation: BLOCK_M x BLOCK_K x BLOCK_N products per step
SUM_KERNEL_TILE = 4096  # moe_sum_kernel: tokens x columns per program


def _validate(x, w13, w2, topk_weights, topk_ids, activation, formulation, int8=False):
    require_tensor(OP, "hidden_states", x, ndim=2)
    weight_dtypes = (torch.int8,) if int8 else FLOAT_DTYPES  # use_int8_w8a8: int8 experts
    require_tensor(OP, "w13", w13, dtypes=weight_dtypes, ndim=3)
    require_tensor(OP, "w2", w2, dtypes=weight_dtypes, ndim=3)
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
    require_same(OP, "w13's shape and (E, 2I, hidden size)", w13=tuple(w13.shape),
                 expected=(experts, 2 * inter, hidden))  # fmt: skip
    require_same(OP, "w2's shape and (E, hidden size, I)", w2=tuple(w2.shape), expected=(experts, hidden, inter))
    if not int8:
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


def _validate_scales(w13_scale, w2_scale, experts, hidden, inter):
    """use_int8_w8a8: per-output-channel fp32 scales, [E, 2I, 1] and [E, H, 1]
    (SGLang's W8A8Int8MoEMethod) or without the trailing 1, contiguous."""
    for name, t, rows in (("w13_scale", w13_scale, 2 * inter), ("w2_scale", w2_scale, hidden)):
        if t is None:
            raise ValueError(f"{OP}: {name} is None; use_int8_w8a8 needs per-output-channel fp32 scales")
        require_tensor(OP, name, t, dtypes=(torch.float32,), min_ndim=2, max_ndim=3)
        if tuple(t.shape[:2]) != (experts, rows) or t.numel() != experts * rows or not t.is_contiguous():
            raise ValueError(f"{OP}: {name} must be a contiguous fp32 [{experts}, {rows}, 1] tensor, got shape "
                             f"{tuple(t.shape)} with strides {t.stride()}")  # fmt: skip


def _check_ids(topk_ids, experts):
    lo, hi = torch.aminmax(topk_ids)
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi >= experts:
        raise ValueError(f"{OP}: topk_ids holds expert id {lo if lo < 0 else hi}, outside [0, {experts})")


def _tiles(config, key, size, use_dot, default_key=None):
    """A power-of-two tile from the config (`default_key`'s value where the
    config has no `key`), no wider than the padded `size` (and at least
    tl.dot's 16 where dot is used)."""
    tile = power_of_two_at_most(int(config.get(key, config.get(default_key))))
    return max(16 if use_dot else 1, min(tile, dot_block(size, use_dot)))


class _Plan:
    """What a shape class launches with: block sizes and a `KernelLaunch` per kernel."""

    def __init__(self, experts, top_k, hidden, inter, dtype, activation, on_input, formulation, config, caps=None,
                 int8=False):  # fmt: skip
        caps = caps or capabilities()
        name = formulation or config.get("formulation") or ("dot" if caps.has_dot else "sum")
        require_choice(OP, "formulation", name, FORMULATIONS)
        use_dot = name == "dot"
        # int8 experts: quant.kernels.int8_tile_product's formulation (int8 dot, fp16 dot, sum)
        w8a8 = ((0 if caps.dot_int8 else 1) if use_dot else 2) if int8 else -1
        dot_fp32 = use_dot and (dtype == torch.float32 or (dtype == torch.bfloat16 and not caps.dot_bf16))
        zero = caps.load_ignores_other
        # BLOCK_M/N/K: autotune_configs/default.yaml (their one home); W2's tiles default to W13's
        self.block_m = bm = _tiles(config, "BLOCK_M", 1 << 30, use_dot)
        bn, bk = _tiles(config, "BLOCK_N", inter, use_dot), _tiles(config, "BLOCK_K", hidden, use_dot)
        dbn = _tiles(config, "DOWN_BLOCK_N", hidden, use_dot, default_key="BLOCK_N")
        dbk = _tiles(config, "DOWN_BLOCK_K", inter, use_dot, default_key="BLOCK_K")
        if not use_dot:  # the [M, K, N] product of one step must stay small
            while bm * bk * bn > SUM_TILE_CAP and bk > 1:
                bk //= 2
            while bm * dbk * dbn > SUM_TILE_CAP and dbk > 1:
                dbk //= 2
        if int8:  # a float step of int8 products stays exact up to 1024 of them
            bk, dbk = min(bk, MAX_EXACT_BLOCK_K), min(dbk, MAX_EXACT_BLOCK_K)
        # every kernel with its constexprs (`ops.launch`); the config's num_warps / num_stages are the GEMMs'
        keywords = run_keywords(launch_options(config))

        def bind(kernel, keywords=run_keywords({}), **constexprs):
            return KernelLaunch(kernel, constexpr_args(kernel, **constexprs), keywords)

        common = dict(H=hidden, I=inter, BLOCK_M=bm, USE_DOT=use_dot, DOT_FP32=dot_fp32, ZERO_AFTER_LOAD=zero,
                      W8A8=w8a8)  # fmt: skip
        self.gate_up = bind(moe_gate_up_kernel, keywords, **common, TOP_K=top_k, BLOCK_N=bn, BLOCK_K=bk,
                            ACTIVATION=ACTIVATIONS.index(activation), WEIGHT_ON_INPUT=on_input)  # fmt: skip
        self.down = bind(moe_down_kernel, keywords, **common, BLOCK_N=dbn, BLOCK_K=dbk, MUL_WEIGHT=not on_input)
        self.gate_up_tiles, self.down_tiles = -(-inter // bn), -(-hidden // dbn)
        block_e = triton.next_power_of_2(experts)
        tile = power_of_two_at_most(int(config.get("ALIGN_TILE", align.ALIGN_TILE)))
        tiles = dict(E=experts, BLOCK_E=block_e, BLOCK_M=bm, EXPERT_TILE=min(tile, block_e), BLOCK_TILE=tile)
        self.align_single = bind(align.moe_align_single_kernel, **tiles, SLOT_TILE=tile)
        self.align_count = bind(align.moe_align_count_kernel, E=experts, BLOCK_E=block_e, SLOT_TILE=tile)
        self.align_prefix = bind(align.moe_align_prefix_kernel, **tiles, MAX_CHUNKS=align.MAX_CHUNKS, ZERO_AFTER_LOAD=zero)
        self.align_scatter = bind(align.moe_align_scatter_kernel, E=experts, SLOT_TILE=tile)
        block_h = min(triton.next_power_of_2(hidden), 1024)
        self.sum_rows = max(1, SUM_KERNEL_TILE // block_h)
        self.sum_cols = -(-hidden // block_h)
        self.sum = bind(moe_sum_kernel, H=hidden, E=experts, TOP_K=top_k, BLOCK_T=self.sum_rows, BLOCK_H=block_h,
                        ZERO_AFTER_LOAD=zero)  # fmt: skip
        # A decode's launches (n <= SINGLE_PROGRAM_SLOTS, float experts): one
        # sequence, keyed once over `_DECODE_ARGS`, grids sized per call.
        steps = [(self.align_single, _DECODE_PICKS["align"]), (self.gate_up, _DECODE_PICKS["gate_up"]),
                 (self.down, _DECODE_PICKS["down"])] + ([(self.sum, _DECODE_PICKS["sum"])] if top_k > 1 else [])  # fmt: skip
        self.decode = LaunchSequence([(launch, None, pick) for launch, pick in steps], len(_DECODE_ARGS))


# The decode sequence's argument tuple and each launch's pick of it; K = 1's
# down launch writes the output (`down_out` = out, offset 0, out's row
# stride), K > 1's the scratch after the activations (summed by the last).
_DECODE_ARGS = ("ids", "index", "n", "bound", "x", "w13", "scratch", "weights", "x_stride", "w13_stride_e",
                "w13_stride_n", "none", "w2", "down_out", "down_offset", "w2_stride_e", "w2_stride_n",
                "down_stride", "out", "tokens", "out_stride")  # fmt: skip
_DECODE_PICKS = {
    name: operator.itemgetter(*map(_DECODE_ARGS.index, args))
    for name, args in {
        "align": ("ids", "index", "n", "bound"),
        "gate_up": ("x", "w13", "scratch", "index", "bound", "weights", "x_stride", "w13_stride_e", "w13_stride_n",
                    "none", "none"),
        "down": ("scratch", "w2", "down_out", "down_offset", "index", "bound", "weights", "w2_stride_e",
                 "w2_stride_n", "down_stride", "none", "none"),
        "sum": ("scratch", "down_offset", "ids", "out", "tokens", "out_stride"),
    }.items()
}  # fmt: skip


@plan_cache
def _plan(bucket, experts, top_k, hidden, inter, dtype, activation, on_input, formulation, int8=False,
          config=None) -> _Plan:  # fmt: skip
    """The launch plan of a shape class (token count rounded up to a power
    of two): resolved once per class, target and config directory (an
    explicit `config` builds afresh)."""
    require_choice(OP, "activation", activation, ACTIVATIONS)
    dims = dict(tokens=bucket, num_experts=experts, top_k=top_k, hidden_size=hidden, intermediate_size=inter)
    config = lookup_config(OP, **dims) if config is None else explicit_config(OP, config, **dims)
    return _Plan(experts, top_k, hidden, inter, dtype, activation, on_input, formulation, config, int8=int8)


def blocks_bound(n: int, experts: int, block_m: int) -> int:
    """At most this many BLOCK_M-row blocks hold n slots sorted by expert
    (each expert's last block partly filled): the grids' first dimension."""
    return min(n, -(-n // block_m) + min(experts, n))


def align_slots(topk_ids: torch.Tensor, num_experts: int, plan: _Plan):
    """(index, n_blocks) for the flat ids: index [3 * n_blocks + n] int32 is
    the block table [n_blocks, 3] then the n sorted slots (see `align`)."""
    n = topk_ids.numel()
    bound = blocks_bound(n, num_experts, plan.block_m)
    if n <= align.SINGLE_PROGRAM_SLOTS:
        index = topk_ids.new_empty(3 * bound + n, dtype=torch.int32)
        plan.align_single((1,), topk_ids, index, n, bound)
        return index, bound
    chunk = max(align.MIN_CHUNK, 1 << (-(-n // align.MAX_CHUNKS) - 1).bit_length())
    chunks = -(-n // chunk)
    index = topk_ids.new_empty(3 * bound + n + (chunks + 1) * num_experts, dtype=torch.int32)
    # after the table and the sorted slots: the chunks' expert counts, then the experts' starts
    sorted_slots = index[3 * bound : 3 * bound + n]
    chunk_counts, starts = index[3 * bound + n : -num_experts], index[-num_experts:]
    plan.align_count((chunks,), topk_ids, chunk_counts, n, chunk)
    plan.align_prefix((1,), chunk_counts, starts, index, chunks, bound)
    plan.align_scatter((chunks,), topk_ids, chunk_counts, starts, sorted_slots, n, chunk)
    return index, bound


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
    w13_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The routed experts' output [T, H] in hidden_states' dtype (see the module doc).

    ``use_int8_w8a8`` (SGLang's W8A8Int8MoEMethod): w13 and w2 are int8 with
    per-output-channel fp32 scales `w13_scale` [E, 2I, 1] and `w2_scale`
    [E, H, 1]; x and the activation rows are quantized per token
    (`per_token_quant_int8`) and each GEMM accumulates exactly in int32,
    scaled by the token's and the channel's scales after its loop.

    hidden_states [T, H] (rows may be strided); w13 [E, 2I, H] (gate rows,
    then up rows: SGLang's layout) and w2 [E, H, I], in hidden_states'
    dtype; topk_weights [T, K] (any float dtype) and topk_ids [T, K] (int32
    or int64) as `moe_topk` returns them. `activation`: "silu", "gelu" (exact, erf) or
    "gelu_tanh". With `apply_router_weight_on_input` the weight scales the
    input of W13 instead of the output of W2. Checked mode (`check`,
    ``KUNLUN_TRITON_CHECK``) validates shapes, dtypes and devices and
    rejects ids outside [0, E) (a sync); unchecked, the launcher reads only
    the sizes it launches with (a wrong shape reads unrelated memory) and
    ids outside [0, E) contribute nothing (expert parallelism's -1). `formulation`
    ("dot" | "sum") overrides the config's. `out` [T, H] (rows may be
    strided) receives the result instead of a new tensor; it may be
    hidden_states itself (SGLang's ``inplace``: the input is read in full
    before the output is written), no other tensor of the call.
    """
    if checked_mode(check):
        tokens, hidden, experts, inter, top_k = _validate(hidden_states, w13, w2, topk_weights, topk_ids, activation,
                                                          formulation, use_int8_w8a8)  # fmt: skip
        if use_int8_w8a8:
            _validate_scales(w13_scale, w2_scale, experts, hidden, inter)
            require_same_device(OP, hidden_states=hidden_states, w13_scale=w13_scale, w2_scale=w2_scale)
        if out is not None:
            require_tensor(OP, "out", out, ndim=2)
            require_same(OP, "shapes of out and hidden_states", out=tuple(out.shape),
                         hidden_states=tuple(hidden_states.shape))  # fmt: skip
            require_same(OP, "dtypes of out and hidden_states", out=out.dtype, hidden_states=hidden_states.dtype)
            require_same_device(OP, hidden_states=hidden_states, out=out)
        if tokens:
            _check_ids(topk_ids, experts)
        tensors = (hidden_states, w13, w2, topk_weights, topk_ids)
    else:  # the launch's sizes only: the shapes and devices are the caller's promise
        (tokens, hidden), experts, inter, top_k = hidden_states.shape, w13.shape[0], w2.shape[2], topk_ids.shape[1]
        tensors = (hidden_states,)
    if out is None:
        out = hidden_states.new_empty(tokens, hidden)
    if tokens == 0:
        return out
    int8 = bool(use_int8_w8a8)
    if not use_triton(OP, *tensors):
        quant = dict(use_int8_w8a8=True, w13_scale=w13_scale, w2_scale=w2_scale) if int8 else {}
        return out.copy_(reference.fused_experts(hidden_states, w13, w2, topk_weights, topk_ids, activation=activation,
                                                 apply_router_weight_on_input=apply_router_weight_on_input,
                                                 **quant))  # fmt: skip
    args = (1 << (tokens - 1).bit_length(), experts, top_k, hidden, inter, hidden_states.dtype, activation,
            bool(apply_router_weight_on_input), formulation, int8)  # fmt: skip
    plan = _plan(*args) if config is None else _plan.uncached(*args, config)
    ids = topk_ids if topk_ids.is_contiguous() else topk_ids.contiguous()
    weights = topk_weights if topk_weights.is_contiguous() else topk_weights.contiguous()
    n = tokens * top_k
    # One scratch allocation: the sorted rows' act(gate) * up [n, I], then
    # (K > 1) the slots' outputs [n, H] from a 64-element boundary (aligned
    # whatever n: Triton specialises the offset on its 16-divisibility).
    inter_size = -(-n * inter // 64) * 64
    scratch = hidden_states.new_empty(inter_size + n * hidden if top_k > 1 else n * inter)
    if n <= align.SINGLE_PROGRAM_SLOTS and not int8:  # a decode: its launches as one sequence
        bound = blocks_bound(n, experts, plan.block_m)
        index = ids.new_empty(3 * bound + n, dtype=torch.int32)
        down_out, down_offset, down_stride = (scratch, inter_size, hidden) if top_k > 1 else (out, 0, out.stride(0))
        plan.decode((ids, index, n, bound, hidden_states, w13, scratch, weights, hidden_states.stride(0),
                     *w13.stride()[:2], None, w2, down_out, down_offset, *w2.stride()[:2], down_stride, out, tokens,
                     out.stride(0)),
                    ((1, 1, 1), (bound, plan.gate_up_tiles, 1), (bound, plan.down_tiles, 1),
                     (-(-tokens // plan.sum_rows), plan.sum_cols, 1))[: 3 + (top_k > 1)])  # fmt: skip
        return out
    x, x_scale = per_token_quant_int8(hidden_states, check=False) if int8 else (hidden_states, None)
    index, bound = align_slots(ids, experts, plan)
    plan.gate_up((bound, plan.gate_up_tiles),
        x, w13, scratch, index, bound, weights, x.stride(0), *w13.stride()[:2], x_scale, w13_scale)  # fmt: skip
    # W8A8: the activation rows quantized per row (SGLang's intermediate cache quantized per token)
    inter_rows, inter_scale = per_token_quant_int8(scratch[: n * inter].view(n, inter), check=False) if int8 \
        else (scratch, None)  # fmt: skip
    if top_k == 1:
        plan.down((bound, plan.down_tiles),
            inter_rows, w2, out, 0, index, bound, weights, *w2.stride()[:2], out.stride(0), inter_scale, w2_scale)  # fmt: skip
        return out
    plan.down((bound, plan.down_tiles),
        inter_rows, w2, scratch, inter_size, index, bound, weights, *w2.stride()[:2], hidden, inter_scale, w2_scale)  # fmt: skip
    plan.sum((-(-tokens // plan.sum_rows), plan.sum_cols), scratch, inter_size, ids, out, tokens, out.stride(0))
    return out
