"""`gdn_split_qkvzba`: a gated-delta-net layer's input projections cut into
the tensors its conv, gates and output norm read (SGLang's
``fused_qkvzba_split_reshape_cat`` and ``fused_qkvzba_split_reshape_cat_contiguous``,
sglang/kernels/ops/attention/triton_gdn_fused_proj.py). A layout shuffle,
no arithmetic: each input element is read once and written once, bitwise.

Per token, with H key heads of width K, HV = G * H value heads of width V
(G the group: value heads per key head), two projections come in:

- ``mixed_qkvz`` [T, 2 H K + 2 HV V], in one of two layouts:

  - ``interleaved`` (Qwen3-Next's fused ``in_proj_qkvz`` checkpoint): H
    groups, group h = [q_h (K) | k_h (K) | v_h (G V) | z_h (G V)], where v_h
    and z_h are value heads h G .. h G + G - 1 back to back (HF transformers'
    ``Qwen3NextGatedDeltaNet.fix_query_key_value_ordering``);
  - ``contiguous`` (Qwen3.5's separate ``in_proj_qkv`` and ``in_proj_z``,
    merged by SGLang's loader): [all q (H K) | all k (H K) | all v (HV V) |
    all z (HV V)];

- ``mixed_ba`` [T, 2 HV]: interleaved, H groups [b_h (G) | a_h (G)];
  contiguous, [all b (HV) | all a (HV)].

Out, in either case (what SGLang's callers read):

- ``mixed_qkv`` [T, 2 H K + HV V] = [all q | all k | all v], contiguous,
  the conv's input (heads in order: key head h's q at columns h K ..);
- ``z`` [T, HV, V] contiguous (the output norm's gate);
- ``b``, ``a`` [T, HV] contiguous, in ``mixed_ba``'s dtype (the gates).

The kernel: a program per (BLOCK_T tokens, HEADS_PER_PROGRAM key heads)
copies each of its heads' pieces: q_h and k_h (K each), v_h and z_h (G V
each, contiguous in both layouts), b_h and a_h (G each), each piece one
[BLOCK_T, next power of two] tile at constexpr offsets from the block's
first head (block copies; Kunlun's compiler emits DMA for constexpr-sized,
constexpr-offset tiles; a GPU folds the offsets into its loads). A head's
six loads issue before its six stores, so they are in flight together.
Inputs may have any row stride (a column slice of a fused projection's
output; a constexpr: one per model layer), their last dim contiguous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ...runtime import launch_options, plan_cache, use_triton
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..spec import explicit_config, lookup_config
from ..validation import checked_mode, require_choice, require_number, require_same_device, require_tensor
from . import reference

LAYOUTS = ("interleaved", "contiguous")
MAX_OFFSET = 2**31 - 1  # the kernel's offsets are int32


@triton.jit
def _tile_ptrs(base, rows, row_mask, ROW_STRIDE: tl.constexpr, COL: tl.constexpr, WIDTH: tl.constexpr,
               BLOCK: tl.constexpr, MASK_ROWS: tl.constexpr):  # fmt: skip
    """Pointers to columns COL .. COL + WIDTH of `rows` ([rows, BLOCK], BLOCK
    the power of two at or above WIDTH) and their mask: None where nothing is
    masked (one token a program, WIDTH a power of two)."""
    cols = tl.arange(0, BLOCK)
    ptrs = base + rows[:, None] * ROW_STRIDE + COL + cols[None, :]
    if WIDTH != BLOCK:
        return ptrs, row_mask[:, None] & (cols < WIDTH)[None, :]
    elif MASK_ROWS:
        return ptrs, row_mask[:, None]
    else:
        return ptrs, None


@triton.jit
def _load(base, rows, row_mask, ROW_STRIDE: tl.constexpr, COL: tl.constexpr, WIDTH: tl.constexpr,
          BLOCK: tl.constexpr, MASK_ROWS: tl.constexpr):  # fmt: skip
    ptrs, mask = _tile_ptrs(base, rows, row_mask, ROW_STRIDE, COL, WIDTH, BLOCK, MASK_ROWS)
    return tl.load(ptrs, mask=mask)


@triton.jit
def _store(base, values, rows, row_mask, ROW_STRIDE: tl.constexpr, COL: tl.constexpr, WIDTH: tl.constexpr,
           BLOCK: tl.constexpr, MASK_ROWS: tl.constexpr):  # fmt: skip
    ptrs, mask = _tile_ptrs(base, rows, row_mask, ROW_STRIDE, COL, WIDTH, BLOCK, MASK_ROWS)
    tl.store(ptrs, values, mask=mask)


@triton.jit(do_not_specialize=["tokens"])
def split_qkvzba_kernel(
    qkvz_ptr, ba_ptr, qkv_ptr, z_ptr, b_ptr, a_ptr, tokens,
    QKVZ_STRIDE: tl.constexpr, BA_STRIDE: tl.constexpr, KEY_HEADS: tl.constexpr, GROUP: tl.constexpr,
    KEY_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, INTERLEAVED: tl.constexpr, HEADS: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_G: tl.constexpr,
):  # fmt: skip
    """Program (token block, block of HEADS key heads): each head's q, k, v,
    z, b, a (module docstring)."""
    pid_t = tl.program_id(0)
    # int32 offsets: the launcher keeps a launch's rows x widths below 2**31
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    row_mask = rows < tokens
    MASK_ROWS: tl.constexpr = BLOCK_T > 1  # one token a program: the grid is the tokens
    HV: tl.constexpr = KEY_HEADS * GROUP
    QK: tl.constexpr = KEY_HEADS * KEY_DIM
    GV: tl.constexpr = GROUP * VALUE_DIM  # a key head's value columns
    GW: tl.constexpr = 2 * KEY_DIM + 2 * GV  # an interleaved group's columns
    QKV: tl.constexpr = 2 * QK + HV * VALUE_DIM
    # The block's first key head moves the base pointers once; each head's
    # columns from there are constexprs (folded into the loads' and stores'
    # immediates on a GPU, fixed-size block copies for Kunlun's DMA).
    if HEADS == KEY_HEADS:
        first = 0
    else:
        first = tl.program_id(1) * HEADS
    src_qk = qkvz_ptr + first * (GW if INTERLEAVED else KEY_DIM)
    src_vz = qkvz_ptr + first * (GW if INTERLEAVED else GV)
    src_ba = ba_ptr + first * (2 * GROUP if INTERLEAVED else GROUP)
    dst_qk, dst_v = qkv_ptr + first * KEY_DIM, qkv_ptr + first * GV
    dst_z, dst_b, dst_a = z_ptr + first * GV, b_ptr + first * GROUP, a_ptr + first * GROUP
    for i in tl.static_range(HEADS):
        # where head first + i's pieces start in an input row, from the block's first head
        if INTERLEAVED:
            q_col, k_col, v_col, z_col = i * GW, i * GW + KEY_DIM, i * GW + 2 * KEY_DIM, i * GW + 2 * KEY_DIM + GV
            b_col, a_col = 2 * GROUP * i, 2 * GROUP * i + GROUP
        else:
            q_col, k_col, v_col = i * KEY_DIM, QK + i * KEY_DIM, 2 * QK + i * GV
            z_col = 2 * QK + HV * VALUE_DIM + i * GV
            b_col, a_col = i * GROUP, HV + i * GROUP
        # the six loads first, then the six stores: a store waits for its load's data, so a
        # load after it would issue one memory latency later (six in flight instead of one)
        q = _load(src_qk, rows, row_mask, QKVZ_STRIDE, q_col, KEY_DIM, BLOCK_K, MASK_ROWS)
        k = _load(src_qk, rows, row_mask, QKVZ_STRIDE, k_col, KEY_DIM, BLOCK_K, MASK_ROWS)
        v = _load(src_vz, rows, row_mask, QKVZ_STRIDE, v_col, GV, BLOCK_V, MASK_ROWS)
        z = _load(src_vz, rows, row_mask, QKVZ_STRIDE, z_col, GV, BLOCK_V, MASK_ROWS)
        b = _load(src_ba, rows, row_mask, BA_STRIDE, b_col, GROUP, BLOCK_G, MASK_ROWS)
        a = _load(src_ba, rows, row_mask, BA_STRIDE, a_col, GROUP, BLOCK_G, MASK_ROWS)
        _store(dst_qk, q, rows, row_mask, QKV, i * KEY_DIM, KEY_DIM, BLOCK_K, MASK_ROWS)
        _store(dst_qk, k, rows, row_mask, QKV, QK + i * KEY_DIM, KEY_DIM, BLOCK_K, MASK_ROWS)
        _store(dst_v, v, rows, row_mask, QKV, 2 * QK + i * GV, GV, BLOCK_V, MASK_ROWS)
        _store(dst_z, z, rows, row_mask, HV * VALUE_DIM, i * GV, GV, BLOCK_V, MASK_ROWS)
        _store(dst_b, b, rows, row_mask, HV, i * GROUP, GROUP, BLOCK_G, MASK_ROWS)
        _store(dst_a, a, rows, row_mask, HV, i * GROUP, GROUP, BLOCK_G, MASK_ROWS)


@dataclass(frozen=True)
class SplitPlan:
    launch: KernelLaunch
    block_t: int
    heads: int  # key heads a program


# (key heads, group, key dim, value dim, interleaved, the inputs' row strides): all fixed for a model
# layer, so constexprs (Kunlun's block DMA wants constexpr strides) cost no compilation while serving
def _plan(dims, config) -> SplitPlan:
    key_heads, group, key_dim, value_dim, interleaved, qkvz_stride, ba_stride = dims
    block_t = config["BLOCK_T"]  # a power of two (its ConfigKey, TILE, checks a config)
    heads = math.gcd(config["HEADS_PER_PROGRAM"], key_heads)  # a divisor of the key heads: no head mask
    kernel, pow2 = split_qkvzba_kernel, triton.next_power_of_2  # a piece in one tile, masked past its width
    constexprs = constexpr_args(kernel, QKVZ_STRIDE=qkvz_stride, BA_STRIDE=ba_stride, KEY_HEADS=key_heads, GROUP=group,
                                KEY_DIM=key_dim, VALUE_DIM=value_dim, INTERLEAVED=interleaved, HEADS=heads,
                                BLOCK_T=block_t, BLOCK_K=pow2(key_dim),
                                BLOCK_V=pow2(group * value_dim), BLOCK_G=pow2(group))  # fmt: skip
    return SplitPlan(KernelLaunch(kernel, constexprs, run_keywords(launch_options(config))), block_t, heads)


@plan_cache
def _cached_plan(*dims) -> SplitPlan:
    return _plan(dims, lookup_config("gdn_split_qkvzba", key_dim=dims[2], value_dim=dims[3]))


def _get_plan(dims, config) -> SplitPlan:
    if config is None:
        return _cached_plan(*dims)
    return _plan(dims, explicit_config("gdn_split_qkvzba", config, key_dim=dims[2], value_dim=dims[3]))


def _row_stride(t: torch.Tensor) -> int:
    """A one-row tensor's row stride is any number torch kept: take its width (one plan for it)."""
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def _check(op, mixed_qkvz, mixed_ba, num_k_heads, num_v_heads, head_k_dim, head_v_dim, layout):
    for name, value in (("num_k_heads", num_k_heads), ("num_v_heads", num_v_heads), ("head_k_dim", head_k_dim),
                        ("head_v_dim", head_v_dim)):  # fmt: skip
        require_number(op, name, value, minimum=1, integer=True)
    if num_v_heads % num_k_heads:
        raise ValueError(f"{op}: value heads ({num_v_heads}) must be a multiple of key heads ({num_k_heads})")
    require_choice(op, "layout", layout, LAYOUTS)
    require_tensor(op, "mixed_qkvz", mixed_qkvz, ndim=2)
    require_tensor(op, "mixed_ba", mixed_ba, ndim=2)
    width = 2 * num_k_heads * head_k_dim + 2 * num_v_heads * head_v_dim
    if mixed_qkvz.shape[1] != width:
        raise ValueError(f"{op}: mixed_qkvz must be [tokens, 2 x {num_k_heads} x {head_k_dim} + 2 x {num_v_heads} x "
                         f"{head_v_dim}] = [tokens, {width}], got {tuple(mixed_qkvz.shape)}")  # fmt: skip
    if tuple(mixed_ba.shape) != (mixed_qkvz.shape[0], 2 * num_v_heads):
        raise ValueError(f"{op}: mixed_ba must be [tokens, 2 x value heads] = [{mixed_qkvz.shape[0]}, "
                         f"{2 * num_v_heads}], got {tuple(mixed_ba.shape)}")  # fmt: skip
    require_same_device(op, mixed_qkvz=mixed_qkvz, mixed_ba=mixed_ba)


def gdn_split_qkvzba(mixed_qkvz: torch.Tensor, mixed_ba: torch.Tensor, num_k_heads: int, num_v_heads: int,
                     head_k_dim: int, head_v_dim: int, layout: str = "interleaved", *, check: bool = True,
                     config: dict | None = None) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """Cut a GDN layer's projections into (mixed_qkv, z, b, a) (layouts: the module docstring).

    mixed_qkvz: [T, 2 num_k_heads head_k_dim + 2 num_v_heads head_v_dim];
    mixed_ba: [T, 2 num_v_heads] (any row strides, last dim contiguous);
    layout: "interleaved" (Qwen3-Next, SGLang's ``fused_qkvzba_split_reshape_cat``)
    or "contiguous" (Qwen3.5, ``fused_qkvzba_split_reshape_cat_contiguous``).
    Returns new contiguous tensors: mixed_qkv [T, 2 num_k_heads head_k_dim +
    num_v_heads head_v_dim] and z [T, num_v_heads, head_v_dim] in mixed_qkvz's
    dtype, b and a [T, num_v_heads] in mixed_ba's dtype.
    config: BLOCK_T (tokens a program), HEADS_PER_PROGRAM (key heads a
    program; the op takes its gcd with num_k_heads), num_warps.
    """
    op = "gdn_split_qkvzba"
    if checked_mode(check):
        _check(op, mixed_qkvz, mixed_ba, num_k_heads, num_v_heads, head_k_dim, head_v_dim, layout)
    if not use_triton(op, mixed_qkvz, mixed_ba):
        return reference.gdn_split_qkvzba(mixed_qkvz, mixed_ba, num_k_heads, num_v_heads, head_k_dim, head_v_dim,
                                          layout)  # fmt: skip
    tokens = mixed_qkvz.shape[0]
    qkv_dim = 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim
    mixed_qkv = mixed_qkvz.new_empty(tokens, qkv_dim)
    z = mixed_qkvz.new_empty(tokens, num_v_heads, head_v_dim)
    b = mixed_ba.new_empty(tokens, num_v_heads)
    a = mixed_ba.new_empty(tokens, num_v_heads)
    if tokens == 0:
        return mixed_qkv, z, b, a
    strides = (_row_stride(mixed_qkvz), _row_stride(mixed_ba))
    plan = _get_plan((num_k_heads, num_v_heads // num_k_heads, head_k_dim, head_v_dim, layout == "interleaved",
                      *strides), config)  # fmt: skip
    # the kernel's offsets are int32 (fewer instructions a row than int64): a launch takes at most
    # the rows whose offsets stay within MAX_OFFSET (one launch unless a batch is vast)
    step = max(1, MAX_OFFSET // max(*strides, mixed_qkvz.shape[1]) // plan.block_t) * plan.block_t
    tensors = (mixed_qkvz, mixed_ba, mixed_qkv, z, b, a)
    for start in range(0, tokens, step):
        end = min(tokens, start + step)
        pieces = tensors if end - start == tokens else tuple(t[start:end] for t in tensors)
        plan.launch((-(-(end - start) // plan.block_t), num_k_heads // plan.heads), *pieces, end - start)
    return mixed_qkv, z, b, a
