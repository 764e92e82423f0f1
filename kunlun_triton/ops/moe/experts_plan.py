"""The launch plan of `fused_experts` (fused_experts.py: the math and the
launches): per shape class, the block sizes from the config and the target's
capabilities, a `KernelLaunch` per kernel (alignment, gate/up, down, sum), the
decode's launches as one `LaunchSequence`, and the alignment of the routing
slots into expert blocks (`align_slots`)."""

from __future__ import annotations

import operator
from typing import NamedTuple

import torch
import triton

from ...runtime import capabilities, launch_options, plan_cache
from ..launch import KernelLaunch, LaunchSequence, constexpr_args, run_keywords
from ..quant.ops import MAX_EXACT_BLOCK_K
from ..spec import explicit_config, lookup_config
from ..validation import power_of_two_at_most, require_choice
from . import align
from .expert_kernels import moe_down_kernel, moe_gate_up_kernel, moe_sum_kernel
from .experts_checks import ACTIVATIONS, FORMULATIONS, OP
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


class ExpertsPlan:
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
def expert_plan(bucket, experts, top_k, hidden, inter, dtype, activation, on_input, formulation, weights="float",
          gemm1=None, summed=False, config=None) -> ExpertsPlan:  # fmt: skip
    """The launch plan of a shape class (token count rounded up to a power
    of two): resolved once per class, target and config directory (an
    explicit `config` builds afresh)."""
    require_choice(OP, "activation", activation, ACTIVATIONS)
    dims = dict(tokens=bucket, num_experts=experts, top_k=top_k, hidden_size=hidden, intermediate_size=inter)
    config = lookup_config(OP, **dims) if config is None else explicit_config(OP, config, **dims)
    return ExpertsPlan(experts, top_k, hidden, inter, dtype, activation, on_input, formulation, config, weights=weights,
                 gemm1=gemm1, summed=summed)  # fmt: skip


def blocks_bound(n: int, experts: int, block_m: int) -> int:
    """At most this many BLOCK_M-row blocks hold n slots sorted by expert
    (each expert's last block partly filled): the grids' first dimension."""
    return min(n, -(-n // block_m) + min(experts, n))


def align_slots(topk_ids: torch.Tensor, num_experts: int, plan: ExpertsPlan):
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
