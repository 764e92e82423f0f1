"""`decode_attention` as one program over many (request, KV head) rows: the
interpreter's plan.

The Triton interpreter pays per ``tl`` op per program (Triton's semantic
layer in Python, then one numpy op), hardly per element. The split-KV
kernel (`decode_kernels.decode_partial_kernel`) runs one program per
(request, KV head, split): at SmolLM2's batch 3 that is 9 programs of about
the same ops each, a layer. Here a program takes BLOCK_R rows
r = request * kv_heads + kv head at once, as 3-D tiles:

    q [R, G, D]   (the GROUP query heads of each row's KV head)
    K [R, D, N]   (N keys of each row's request, through its slot ids)
    V [R, N, Dv]
    s = q K [R, G, N] (a batched tl.dot),  online softmax over N per (r, g)

so one launch of one program covers the batch: the same op count as one of
the 9 programs before. Each row runs its own keys from its own first key in
BLOCK_N tiles (the loop runs to the longest row; shorter rows are masked),
so a row's reduction order depends on its own length only, as with one
split per request. A request with no keys gets zeros. Attention sinks
(HAS_SINKS) join each row's softmax after its keys (`tiles.fold_sink`). The loop folds all
of a row's keys, so there is no split and no merge; the launcher takes this
path only where the split plan would give one split per request.

`BATCH_ROWS` in the config (only autotune_configs/interpreter.yaml sets it;
default 0) enables it and caps BLOCK_R. Compiled targets never launch this
kernel: their decode is the split-KV plan, unchanged. MLA's split head dim
(BLOCK_DPE > 0) stays on the split-KV kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...runtime import plan_cache
from ..launch import KernelLaunch, constexpr_args
from ..loads import masked_load
from .fp8 import fp8_unit, kv_values, pool_scores_scale
from .shared import Formulation, dim_block, next_power_of_2
from .tiles import scale_and_cap


@triton.jit
def batched_scores(q, k_t, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """q [R, G, D] times k_t [R, D, N] -> [R, G, N] in fp32 (`tiles.scores`, batched)."""
    if USE_DOT:
        if DOT_FP32:
            return tl.dot(q.to(tl.float32), k_t.to(tl.float32), input_precision="ieee")
        else:
            return tl.dot(q, k_t)
    else:
        return tl.sum(q.to(tl.float32)[:, :, :, None] * k_t.to(tl.float32)[:, None, :, :], axis=2)


@triton.jit
def batched_values(p, v, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """p [R, G, N] fp32 times v [R, N, Dv] -> [R, G, Dv] in fp32 (`tiles.weighted_values`, batched)."""
    if USE_DOT:
        if DOT_FP32:
            return tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            return tl.dot(p.to(v.dtype), v)
    else:
        return tl.sum(p[:, :, :, None] * v.to(tl.float32)[:, None, :, :], axis=2)


@triton.jit
def decode_batch_kernel(
    q_ptr,
    k_buffer_ptr,
    v_buffer_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    o_ptr,
    sinks_ptr,  # [q_heads] (read only with HAS_SINKS)
    sm_scale,
    n_rows,  # batch * kv_heads
    q_stride_b,
    q_stride_h,
    kb_stride_s,
    kb_stride_h,
    vb_stride_s,
    vb_stride_h,
    o_stride_b,
    o_stride_h,
    k_scale,
    v_scale,
    KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOGIT_CAP: tl.constexpr,
    WINDOW: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_FP32: tl.constexpr,
    POOL_I64: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    KV_FORMAT: tl.constexpr,
    HAS_SINKS: tl.constexpr,
):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = r < n_rows
    b = tl.where(row_mask, r // KV_HEADS, 0)  # padding rows read request 0's metadata, then mask it away
    kv_head = r % KV_HEADS
    kv_start = tl.load(kv_indptr_ptr + b)
    kv_len = tl.where(row_mask, tl.load(kv_indptr_ptr + b + 1) - kv_start, 0)
    first = tl.zeros_like(kv_len)
    if WINDOW > 0:  # the query sits at kv_len - 1 and sees WINDOW keys before it
        first = tl.maximum(kv_len - 1 - WINDOW, 0)
    n_keys = kv_len - first  # [R]
    key_row = kv_start + first  # where row r's visible slot ids start in kv_indices

    offs_g = tl.arange(0, BLOCK_G)
    heads = kv_head[:, None] * GROUP + offs_g[None, :]  # [R, G]
    head_mask = row_mask[:, None] & (offs_g < GROUP)[None, :]
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_mask = offs_d < HEAD_DIM
    dv_mask = offs_dv < V_DIM
    q = masked_load(q_ptr + b[:, None, None] * q_stride_b + heads[:, :, None] * q_stride_h + offs_d[None, None, :],
                    head_mask[:, :, None] & d_mask[None, None, :], 0.0, LOAD_IGNORES_OTHER)  # fmt: skip

    m_i = tl.full([BLOCK_R, BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_R, BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_G, BLOCK_DV], dtype=tl.float32)
    k_rows = k_buffer_ptr + kv_head[:, None, None] * kb_stride_h
    v_rows = v_buffer_ptr + kv_head[:, None, None] * vb_stride_h
    for n0 in range(0, tl.max(n_keys, 0), BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_mask = offs_n[None, :] < n_keys[:, None]  # [R, N]
        slot = masked_load(kv_indices_ptr + key_row[:, None] + offs_n[None, :], n_mask, 0, LOAD_IGNORES_OTHER)
        if POOL_I64:
            slot = slot.to(tl.int64)
        k_t = masked_load(k_rows + slot[:, None, :] * kb_stride_s + offs_d[None, :, None],
                          n_mask[:, None, :] & d_mask[None, :, None], 0.0, LOAD_IGNORES_OTHER)  # fmt: skip
        k_t = kv_values(k_t, fp8_unit(k_scale, KV_FORMAT, False), q, KV_FORMAT, False, USE_DOT, DOT_FP32)
        s = batched_scores(q, k_t, USE_DOT, DOT_FP32)
        s = tl.where(n_mask[:, None, :], scale_and_cap(s, pool_scores_scale(sm_scale, k_scale, KV_FORMAT), LOGIT_CAP),
                     float("-inf"))  # fmt: skip
        v = masked_load(v_rows + slot[:, :, None] * vb_stride_s + offs_dv[None, None, :],
                        n_mask[:, :, None] & dv_mask[None, None, :], 0.0, LOAD_IGNORES_OTHER)  # fmt: skip
        v = kv_values(v, fp8_unit(v_scale, KV_FORMAT, False), q, KV_FORMAT, False, USE_DOT, DOT_FP32)
        # `tiles.online_softmax_update` over the last axis (see there: a row
        # with no key yet keeps m = -inf and uses 0 in the exponents)
        m_new = tl.maximum(m_i, tl.max(s, 2))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_ref)
        p = tl.exp(s - m_ref[:, :, None])
        l_i = l_i * alpha + tl.sum(p, 2)
        acc = acc * alpha[:, :, None] + batched_values(p, v, USE_DOT, DOT_FP32)
        m_i = m_new

    if KV_FORMAT > 0:  # the fp8 tiles were decoded unscaled (`fp8.kv_values`)
        acc = acc * v_scale
    if HAS_SINKS:  # `tiles.fold_sink` over [R, G] rows
        sink = masked_load(sinks_ptr + heads, head_mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
        m_new = tl.maximum(m_i, sink)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_ref)
        l_i = l_i * alpha + tl.exp(sink - m_ref)
        acc = acc * alpha[:, :, None]
    no_keys = l_i == 0.0  # `tiles.finish_rows`: zeros for a request without keys
    out = tl.where(no_keys[:, :, None], 0.0, acc / tl.where(no_keys, 1.0, l_i)[:, :, None])
    tl.store(o_ptr + b[:, None, None] * o_stride_b + heads[:, :, None] * o_stride_h + offs_dv[None, None, :],
             out.to(o_ptr.dtype.element_ty), mask=head_mask[:, :, None] & dv_mask[None, None, :])  # fmt: skip


@plan_cache
def batch_launch(tiles: tuple, options: tuple, block_r: int, kv_heads: int, group: int, head_dim: int, v_dim: int,
                 logit_cap: float, window: int, pool_i64: bool, fmt: int, has_sinks: bool = False) -> KernelLaunch:  # fmt: skip
    """The kernel with its constexprs and launch options (`options`: the
    plan's, as items), once per shape class (`tiles`: the plan's use_dot,
    dot_fp32, block_d, block_dv, block_n, load_ignores_other)."""
    use_dot, dot_fp32, block_d, block_dv, block_n, load_ignores_other = tiles
    block_g = max(next_power_of_2(group), 16 if use_dot else 1)  # tl.dot tiles are at least 16 x 16
    constexprs = constexpr_args(
        decode_batch_kernel, KV_HEADS=kv_heads, GROUP=group, HEAD_DIM=head_dim, V_DIM=v_dim, BLOCK_R=block_r,
        BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_DV=block_dv, BLOCK_N=block_n, LOGIT_CAP=logit_cap, WINDOW=window,
        USE_DOT=use_dot, DOT_FP32=dot_fp32, POOL_I64=pool_i64, LOAD_IGNORES_OTHER=load_ignores_other,
        KV_FORMAT=fmt, HAS_SINKS=has_sinks)  # fmt: skip
    return KernelLaunch(decode_batch_kernel, constexprs, dict(options))


def launch_batch(plan, q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale, logit_cap, window, pool_i64, fmt,
                 k_scale, v_scale, sinks=None) -> None:  # fmt: skip
    """One launch of cdiv(rows, BLOCK_R) programs, BLOCK_R = the rows rounded
    up to a power of two, at most the config's BATCH_ROWS."""
    batch, q_heads, head_dim = q.shape
    kv_heads, v_dim = k_buffer.shape[1], v_buffer.shape[2]
    rows = batch * kv_heads
    block_r = min(next_power_of_2(rows), next_power_of_2(plan.batch_rows))
    # The whole head dim as one padded tile, never the split-KV plan's head +
    # tail tiles (80 = 64 + 16): padding costs the interpreter nothing per op.
    block_d = dim_block(head_dim, Formulation(plan.use_dot, plan.dot_fp32))
    tiles = (plan.use_dot, plan.dot_fp32, block_d, plan.block_dv, plan.block_n, plan.load_ignores_other)
    launch = batch_launch(tiles, tuple(plan.launch.items()), block_r, kv_heads, q_heads // kv_heads, head_dim, v_dim,
                          logit_cap, window, pool_i64, fmt, sinks is not None)  # fmt: skip
    qs, kbs, vbs, os_ = q.stride(), k_buffer.stride(), v_buffer.stride(), o.stride()  # (one call per tensor)
    launch((-(-rows // block_r),),
        q, k_buffer, v_buffer, kv_indptr, kv_indices, o, kv_indptr if sinks is None else sinks, sm_scale, rows, qs[0], qs[1], kbs[0], kbs[1], vbs[0], vbs[1],
        os_[0], os_[1], k_scale, v_scale)  # fmt: skip
