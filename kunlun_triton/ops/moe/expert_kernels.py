"""The kernels of `fused_experts` (its launcher and the math: `fused_experts.py`).

`moe_gate_up_kernel` (act(gate) * up per expert-sorted row), `moe_down_kernel`
(W2 times those rows, times the routing weight) and `moe_sum_kernel` (a
token's K slot outputs summed in fp32): launches 2-4 of `fused_experts`.
Their W8A8 path (constexpr ``W8A8`` >= 0) multiplies int8 tiles exactly in
int32 (`quant.kernels.int8_tile_product`); their MXFP4 path decodes packed
e2m1 weights per 32-element group in the loop (`mxfp4`); gpt-oss's expert
biases, interleaved gate/up rows and clamped SwiGLU are epilogue options.
All constexprs, so the float path compiles as if they did not exist.

Blocks belong to one expert, so an expert with no token launches no work;
a program past the last block returns after one load. The matmuls are
``tl.dot`` or, where a target lacks it, ``tl.sum`` of broadcast products
(``formulation: dot | sum`` per target in ``autotune_configs/``). Weight
tiles of a ragged last column tile read rows ``col % N`` (in bounds; the
extra columns are never stored), so only the K tail needs a mask, and
only when the constexpr width is not a multiple of BLOCK_K.
"""

import triton
import triton.language as tl

from ..quant.kernels import int8_tile_product
from .mxfp4 import mxfp4_group_product
from .tiles import gated_activation, load_or_zero, tile_matmul


@triton.jit
def _block_rows(block_info_ptr, n_blocks, b, BLOCK_M: tl.constexpr):
    """(sorted rows, row mask, slots) of block b (the sorted slots follow
    the n_blocks x 3 table: `align`); padding rows repeat the block's first
    row so their loads stay in bounds (never stored)."""
    first = tl.load(block_info_ptr + 3 * b + 1)
    end = tl.load(block_info_ptr + 3 * b + 2)
    rows = first + tl.arange(0, BLOCK_M)
    row_ok = rows < end
    rows = tl.where(row_ok, rows, first)
    return rows, row_ok, tl.load(block_info_ptr + 3 * n_blocks + rows)


@triton.jit(do_not_specialize=["n_blocks"])
def moe_gate_up_kernel(
    x_ptr,
    w13_ptr,
    inter_ptr,  # [slots, I] in x's dtype, rows in sorted order
    block_info_ptr,  # [n_blocks, 3], then the sorted slots (`align`)
    n_blocks,
    topk_weights_ptr,
    x_stride,
    w_stride_e,
    w_stride_n,
    a_scale_ptr,  # W8A8: x's per-token scales [T]; else None
    w_scale_ptr,  # W8A8: W13's per-channel fp32 scales [E, 2I]; MXFP4: its e8m0 scales [E, 2I, H / 32]; else None
    bias_ptr,  # HAS_BIAS: b1 [E, 2I] (W13's row order); else None
    H: tl.constexpr,
    I: tl.constexpr,
    TOP_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ACTIVATION: tl.constexpr,
    WEIGHT_ON_INPUT: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_FP32: tl.constexpr,
    ZERO_AFTER_LOAD: tl.constexpr,
    W8A8: tl.constexpr,
    MXFP4: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ALPHA: tl.constexpr,
    LIMIT: tl.constexpr,
):
    """inter[row] = act(gate + b_gate) * (up + b_up) for one block of rows and BLOCK_N columns of I.

    W8A8 >= 0: x and W13 are int8, the products exact in int32 (`W8A8` is
    `quant.kernels.int8_tile_product`'s formulation), scaled per token and
    per channel after the loop; MXFP4: W13 is packed e2m1 with e8m0 scales,
    decoded per 32-element group inside the loop (`mxfp4`); else float
    operands (`tile_matmul`). Column c's gate and up are W13 rows c and
    I + c, or 2c and 2c + 1 when INTERLEAVED (gpt-oss)."""
    expert = tl.load(block_info_ptr + 3 * tl.program_id(0))
    if expert < 0:  # past the last block
        return
    rows, row_ok, slots = _block_rows(block_info_ptr, n_blocks, tl.program_id(0), BLOCK_M)
    tokens = (slots // TOP_K).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if INTERLEAVED:
        gate_rows = 2 * (cols % I)
        UP_ROWS: tl.constexpr = 1
    else:
        gate_rows = cols % I
        UP_ROWS: tl.constexpr = I
    if W8A8 >= 0:
        gate = tl.zeros([BLOCK_M, BLOCK_N], tl.int32)
        up = tl.zeros([BLOCK_M, BLOCK_N], tl.int32)
    else:
        gate = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    if MXFP4:  # BLOCK_K divides H: no mask
        j = tl.arange(0, 16)
        a_ptrs = x_ptr + tokens[:, None] * x_stride + 2 * j[None, :]
        gate_ptrs = w13_ptr + expert.to(tl.int64) * w_stride_e + gate_rows[None, :].to(tl.int64) * w_stride_n + j[:, None]
        up_ptrs = gate_ptrs + UP_ROWS * w_stride_n
        gs_ptrs = w_scale_ptr + (expert.to(tl.int64) * 2 * I + gate_rows) * (H // 32)
        us_ptrs = gs_ptrs + UP_ROWS * (H // 32)
        for k0 in range(0, H, BLOCK_K):
            for g in tl.static_range(BLOCK_K // 32):
                gate = mxfp4_group_product(a_ptrs + 32 * g, gate_ptrs + 16 * g, gs_ptrs + g, gate, USE_DOT, DOT_FP32)
                up = mxfp4_group_product(a_ptrs + 32 * g, up_ptrs + 16 * g, us_ptrs + g, up, USE_DOT, DOT_FP32)
            a_ptrs += BLOCK_K
            gate_ptrs += BLOCK_K // 2
            up_ptrs += BLOCK_K // 2
            gs_ptrs += BLOCK_K // 32
            us_ptrs += BLOCK_K // 32
    else:
        k = tl.arange(0, BLOCK_K)
        a_ptrs = x_ptr + tokens[:, None] * x_stride + k[None, :]
        gate_ptrs = w13_ptr + expert.to(tl.int64) * w_stride_e + gate_rows[None, :].to(tl.int64) * w_stride_n + k[:, None]
        up_ptrs = gate_ptrs + UP_ROWS * w_stride_n
        for k0 in range(0, H, BLOCK_K):
            if H % BLOCK_K == 0:
                a = tl.load(a_ptrs)
                g = tl.load(gate_ptrs)
                u = tl.load(up_ptrs)
            else:
                k_ok = k < H - k0
                a = load_or_zero(a_ptrs, k_ok[None, :], ZERO_AFTER_LOAD)
                g = load_or_zero(gate_ptrs, k_ok[:, None], ZERO_AFTER_LOAD)
                u = load_or_zero(up_ptrs, k_ok[:, None], ZERO_AFTER_LOAD)
            if W8A8 >= 0:
                gate = int8_tile_product(a, g, gate, W8A8)
                up = int8_tile_product(a, u, up, W8A8)
            else:
                gate = tile_matmul(a, g, gate, USE_DOT, DOT_FP32)
                up = tile_matmul(a, u, up, USE_DOT, DOT_FP32)
            a_ptrs += BLOCK_K
            gate_ptrs += BLOCK_K
            up_ptrs += BLOCK_K
    if W8A8 >= 0:  # acc * a_scale[token] * w_scale[channel], as SGLang's int8 runner
        a_scale = tl.load(a_scale_ptr + tokens)[:, None]
        scales = w_scale_ptr + expert.to(tl.int64) * 2 * I + gate_rows
        gate = gate.to(tl.float32) * a_scale * tl.load(scales)[None, :]
        up = up.to(tl.float32) * a_scale * tl.load(scales + UP_ROWS)[None, :]
    if HAS_BIAS:  # after the scales, before the routing weight: SGLang's fused_moe_kernel order
        bias = bias_ptr + expert.to(tl.int64) * 2 * I + gate_rows
        gate += tl.load(bias).to(tl.float32)[None, :]
        up += tl.load(bias + UP_ROWS).to(tl.float32)[None, :]
    if WEIGHT_ON_INPUT:  # W13 @ (w x) = w (W13 @ x)
        w = tl.load(topk_weights_ptr + slots).to(tl.float32)[:, None]
        gate *= w
        up *= w
    h = gated_activation(gate, up, ACTIVATION, ALPHA, LIMIT)
    out_ptrs = inter_ptr + rows[:, None].to(tl.int64) * I + cols[None, :]
    tl.store(out_ptrs, h.to(inter_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols[None, :] < I))


@triton.jit(do_not_specialize=["n_blocks"])
def moe_down_kernel(
    inter_ptr,
    w2_ptr,
    out_ptr,  # K = 1: the output [T, H]; else the call's scratch, with
    out_offset,  # the slot outputs [slots, H] this many elements in (a multiple of 16: aligned)
    block_info_ptr,  # [n_blocks, 3], then the sorted slots (`align`)
    n_blocks,
    topk_weights_ptr,
    w_stride_e,
    w_stride_n,
    out_stride,
    a_scale_ptr,  # W8A8: the sorted rows' per-row scales [slots]; else None
    w_scale_ptr,  # W8A8: W2's per-channel fp32 scales [E, H]; MXFP4: its e8m0 scales [E, H, I / 32]; else None
    bias_ptr,  # HAS_BIAS: b2 [E, H]; else None
    H: tl.constexpr,
    I: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_FP32: tl.constexpr,
    ZERO_AFTER_LOAD: tl.constexpr,
    W8A8: tl.constexpr,
    MXFP4: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    """out[slot] = w[slot] * (W2[e] @ inter[row] + b2[e]) for one block of rows and BLOCK_N
    columns of H (W8A8 >= 0 / MXFP4: the weights' formats of `moe_gate_up_kernel`)."""
    expert = tl.load(block_info_ptr + 3 * tl.program_id(0))
    if expert < 0:  # past the last block
        return
    rows, row_ok, slots = _block_rows(block_info_ptr, n_blocks, tl.program_id(0), BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if W8A8 >= 0:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.int32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    if MXFP4:  # BLOCK_K divides I: no mask
        j = tl.arange(0, 16)
        a_ptrs = inter_ptr + rows[:, None].to(tl.int64) * I + 2 * j[None, :]
        b_ptrs = w2_ptr + expert.to(tl.int64) * w_stride_e + (cols % H)[None, :].to(tl.int64) * w_stride_n + j[:, None]
        s_ptrs = w_scale_ptr + (expert.to(tl.int64) * H + cols % H) * (I // 32)
        for k0 in range(0, I, BLOCK_K):
            for g in tl.static_range(BLOCK_K // 32):
                acc = mxfp4_group_product(a_ptrs + 32 * g, b_ptrs + 16 * g, s_ptrs + g, acc, USE_DOT, DOT_FP32)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K // 2
            s_ptrs += BLOCK_K // 32
    else:
        k = tl.arange(0, BLOCK_K)
        a_ptrs = inter_ptr + rows[:, None].to(tl.int64) * I + k[None, :]
        b_ptrs = w2_ptr + expert.to(tl.int64) * w_stride_e + (cols % H)[None, :].to(tl.int64) * w_stride_n + k[:, None]
        for k0 in range(0, I, BLOCK_K):
            if I % BLOCK_K == 0:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                k_ok = k < I - k0
                a = load_or_zero(a_ptrs, k_ok[None, :], ZERO_AFTER_LOAD)
                b = load_or_zero(b_ptrs, k_ok[:, None], ZERO_AFTER_LOAD)
            if W8A8 >= 0:
                acc = int8_tile_product(a, b, acc, W8A8)
            else:
                acc = tile_matmul(a, b, acc, USE_DOT, DOT_FP32)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K
    if W8A8 >= 0:
        w_scale = tl.load(w_scale_ptr + expert.to(tl.int64) * H + cols % H)
        acc = acc.to(tl.float32) * tl.load(a_scale_ptr + rows)[:, None] * w_scale[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + expert.to(tl.int64) * H + cols % H).to(tl.float32)[None, :]
    if MUL_WEIGHT:
        acc *= tl.load(topk_weights_ptr + slots).to(tl.float32)[:, None]
    # K = 1: slot == token, and out_ptr is the output itself
    out_ptrs = out_ptr + out_offset + slots[:, None].to(tl.int64) * out_stride + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols[None, :] < H))


@triton.jit(do_not_specialize=["n_tokens"])
def moe_sum_kernel(
    cache_ptr,  # the call's scratch, with the slot outputs [T * TOP_K, H]
    cache_offset,  # this many elements in (a multiple of 16)
    ids_ptr,
    out_ptr,
    n_tokens,
    out_stride,
    H: tl.constexpr,
    E: tl.constexpr,
    TOP_K: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    ZERO_AFTER_LOAD: tl.constexpr,
):
    """out[t] = sum_k cache[t * K + k] in fp32, over the slots with an id in [0, E)."""
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    t_ok = tokens < n_tokens
    c_ok = cols[None, :] < H
    acc = tl.zeros([BLOCK_T, BLOCK_H], tl.float32)
    for k in tl.static_range(TOP_K):
        slots = tokens.to(tl.int64) * TOP_K + k
        e = tl.load(ids_ptr + slots, mask=t_ok)
        ok = (t_ok & (e >= 0) & (e < E))[:, None] & c_ok
        tile = cache_ptr + cache_offset + slots[:, None] * H + cols[None, :]
        acc += load_or_zero(tile, ok, ZERO_AFTER_LOAD).to(tl.float32)
    out_ptrs = out_ptr + tokens[:, None].to(tl.int64) * out_stride + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=t_ok[:, None] & c_ok)
