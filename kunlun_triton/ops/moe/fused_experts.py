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
tiles): `expert_kernels`.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import torch
import triton

from ...runtime import capabilities, launch_options, plan_cache, use_triton
from ..spec import explicit_config, lookup_config
from ..launch import KernelLaunch, LaunchSequence, constexpr_args, run_keywords
from ..validation import checked_mode, power_of_two_at_most, require_choice, require_same, require_same_device, require_tensor
from ..quant.ops import MAX_EXACT_BLOCK_K, per_token_quant_int8
from . import align, reference
from .experts_checks import (
    ACTIVATIONS,
    FORMULATIONS,
    OP,
    check_ids,
    validate,
    validate_gemm1,
    validate_scales,
)
from .expert_kernels import moe_down_kernel, moe_gate_up_kernel, moe_sum_kernel
from .mxfp4 import MXFP4_BLOCK
from .tiles import dot_block

SUM_TILE_CAP = 32768  # tl.sum formulation: BLOCK_M x BLOCK_K x BLOCK_N products per step
SUM_KERNEL_TILE = 4096  # moe_sum_kernel: tokens x columns per program


class Gemm1(NamedTuple):
    """The epilogue options of a plan (hashable: part of its cache key).
    activation: `gated_activation`'s code (3: gpt-oss's clamped SwiGLU, 4:
    SGLang's limit-only clamp); interleaved: gate and up rows alternate."""

    activation: int = 0
    alpha: float = 0.0
    limit: float = 0.0
    interleaved: bool = False
    b1: bool = False
    b2: bool = False


def gemm1_options(activation, gemm1_alpha=None, gemm1_limit=None, gate_up_interleaved=None, b1=None, b2=None) -> Gemm1:
    """SGLang's arguments as a `Gemm1`. gate_up_interleaved None: SGLang's
    default, interleaved exactly when gemm1_alpha is given (its runner reads
    the flag only there)."""
    if gemm1_alpha is not None:
        code = 3
    elif gemm1_limit is not None:
        code = 4
    else:
        code = ACTIVATIONS.index(activation) if activation in ACTIVATIONS else 0
    interleaved = gemm1_alpha is not None if gate_up_interleaved is None else bool(gate_up_interleaved)
    return Gemm1(code, float(gemm1_alpha or 0.0), float(gemm1_limit or 0.0), interleaved, b1 is not None,
                 b2 is not None)  # fmt: skip


PLAIN = {a: Gemm1(i) for i, a in enumerate(ACTIVATIONS)}


def _tiles(config, key, size, use_dot, default_key=None):
    """A power-of-two tile from the config (`default_key`'s value where the
    config has no `key`), no wider than the padded `size` (and at least
    tl.dot's 16 where dot is used)."""
    tile = power_of_two_at_most(int(config.get(key, config.get(default_key))))
    return max(16 if use_dot else 1, min(tile, dot_block(size, use_dot)))


class _Plan:
    """What a shape class launches with: block sizes and a `KernelLaunch` per kernel."""

    def __init__(self, experts, top_k, hidden, inter, dtype, activation, on_input, formulation, config, caps=None,
                 weights="float", gemm1=None, summed=None):  # fmt: skip
        caps = caps or capabilities()
        gemm1 = gemm1 or PLAIN[activation]
        self.summed = top_k > 1 if summed is None else bool(summed)  # slot outputs, then moe_sum_kernel
        int8, mxfp4 = weights == "int8", weights == "mxfp4"
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
        if mxfp4:  # whole 32-element scale groups per step, dividing K (no K mask in that loop)
            bk, dbk = _group_tile(bk, hidden), _group_tile(dbk, inter)
        # every kernel with its constexprs (`ops.launch`); the config's num_warps / num_stages are the GEMMs'
        keywords = run_keywords(launch_options(config))

        def bind(kernel, keywords=run_keywords({}), **constexprs):
            return KernelLaunch(kernel, constexpr_args(kernel, **constexprs), keywords)

        common = dict(H=hidden, I=inter, BLOCK_M=bm, USE_DOT=use_dot, DOT_FP32=dot_fp32, ZERO_AFTER_LOAD=zero,
                      W8A8=w8a8, MXFP4=mxfp4)  # fmt: skip
        self.gate_up = bind(moe_gate_up_kernel, keywords, **common, TOP_K=top_k, BLOCK_N=bn, BLOCK_K=bk,
                            ACTIVATION=gemm1.activation, WEIGHT_ON_INPUT=on_input, INTERLEAVED=gemm1.interleaved,
                            HAS_BIAS=gemm1.b1, ALPHA=gemm1.alpha, LIMIT=gemm1.limit)  # fmt: skip
        self.down = bind(moe_down_kernel, keywords, **common, BLOCK_N=dbn, BLOCK_K=dbk, MUL_WEIGHT=not on_input,
                         HAS_BIAS=gemm1.b2)  # fmt: skip
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
        # A decode's launches (n <= SINGLE_PROGRAM_SLOTS, float or MXFP4 experts):
        # one sequence, keyed once over `_DECODE_ARGS` (and, with scales or
        # biases, `_EXTRA_ARGS` after them), grids sized per call.
        self.extended = mxfp4 or gemm1.b1 or gemm1.b2
        picks = _DECODE_PICKS[self.extended]
        steps = [(self.align_single, picks["align"]), (self.gate_up, picks["gate_up"]), (self.down, picks["down"])] \
            + ([(self.sum, picks["sum"])] if self.summed else [])  # fmt: skip
        self.decode = LaunchSequence([(launch, None, pick) for launch, pick in steps],
                                     len(_DECODE_ARGS) + self.extended * len(_EXTRA_ARGS))  # fmt: skip


# The decode sequence's argument tuple and each launch's pick of it; an
# unsummed plan's (K = 1) down launch writes the output (`down_out` = out,
# offset 0, out's row stride), a summed one's the scratch after the
# activations (summed by the last).
_DECODE_ARGS = ("ids", "index", "n", "bound", "x", "w13", "scratch", "weights", "x_stride", "w13_stride_e",
                "w13_stride_n", "none", "w2", "down_out", "down_offset", "w2_stride_e", "w2_stride_n",
                "down_stride", "out", "tokens", "out_stride")  # fmt: skip
_EXTRA_ARGS = ("w13_scale", "w2_scale", "b1", "b2")


def _decode_picks(extended: bool) -> dict:
    names = _DECODE_ARGS + _EXTRA_ARGS if extended else _DECODE_ARGS
    extra = _EXTRA_ARGS if extended else ("none",) * 4
    return {
        name: operator.itemgetter(*map(names.index, args))
        for name, args in {
            "align": ("ids", "index", "n", "bound"),
            "gate_up": ("x", "w13", "scratch", "index", "bound", "weights", "x_stride", "w13_stride_e", "w13_stride_n",
                        "none", extra[0], extra[2]),
            "down": ("scratch", "w2", "down_out", "down_offset", "index", "bound", "weights", "w2_stride_e",
                     "w2_stride_n", "down_stride", "none", extra[1], extra[3]),
            "sum": ("scratch", "down_offset", "ids", "out", "tokens", "out_stride"),
        }.items()
    }  # fmt: skip


_DECODE_PICKS = {extended: _decode_picks(extended) for extended in (False, True)}


def _group_tile(tile: int, size: int) -> int:
    """The largest power-of-two multiple of 32 at most max(tile, 32) dividing `size` (a multiple of 32)."""
    tile = max(tile, MXFP4_BLOCK)
    while size % tile:
        tile //= 2
    return tile


@plan_cache
def _plan(bucket, experts, top_k, hidden, inter, dtype, activation, on_input, formulation, weights="float",
          gemm1=None, summed=False, config=None) -> _Plan:  # fmt: skip
    """The launch plan of a shape class (token count rounded up to a power
    of two): resolved once per class, target and config directory (an
    explicit `config` builds afresh)."""
    require_choice(OP, "activation", activation, ACTIVATIONS)
    dims = dict(tokens=bucket, num_experts=experts, top_k=top_k, hidden_size=hidden, intermediate_size=inter)
    config = lookup_config(OP, **dims) if config is None else explicit_config(OP, config, **dims)
    return _Plan(experts, top_k, hidden, inter, dtype, activation, on_input, formulation, config, weights=weights,
                 gemm1=gemm1, summed=summed)  # fmt: skip


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
    plan = _plan(*args) if config is None else _plan.uncached(*args, config)
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
