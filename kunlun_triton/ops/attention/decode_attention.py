"""`decode_attention`: split-KV paged attention, one query token per request.

Stage 1 (`decode_partial_kernel`), grid (batch, kv_heads * head blocks, max_splits):
request b's visible keys (the last WINDOW + 1 with a sliding window, else
all) are cut into `splits_b` contiguous ranges of whole BLOCK_N tiles; a
program runs an online softmax over one range for all GROUP query heads of
one kv head, so every K/V tile is loaded once and shared by the group
(GQA/MQA). It writes the range's normalised output and its log-sum-exp:

    o_s = sum_j e^(s_j - lse_s) v_j,     lse_s = log sum_j e^(s_j)

Stage 2 (`decode_merge_kernel`), grid (batch, kv_heads * head blocks): the exact softmax
over all keys is the lse-weighted mean of the splits,

    o = sum_s e^(lse_s - M) o_s / sum_s e^(lse_s - M),   M = max_s lse_s.

With one split per request and ``DIRECT_SINGLE_SPLIT`` in the config (the
interpreter's plan), stage 1 writes `o` itself and stage 2 is not launched.

Split counts are decided on the device, per request, from its length and
two run-time integers (never constexprs, so neither batch size nor context
length ever recompiles a kernel, and a CUDA graph can replay any lengths):

    splits_b = clamp(ceil(n_b / split_tokens), 1, max_splits)
    split_len_b = ceil(ceil(n_b / splits_b) / BLOCK_N) * BLOCK_N

``split_tokens`` is MIN_SPLIT_TOKENS of the config (or 1 with an explicit
`num_kv_splits`); ``max_splits`` fills the device at this batch size:
ceil(PROGRAMS_PER_UNIT * units / (batch * kv_heads * head blocks)), at most
MAX_KV_SPLITS, where units is the target's SM / CU / cluster count
(`runtime.compute_units`: the device's own, else its arch's figure). The fixed
split-tile mode (``split_tile_size=T``: split_tokens = T and a cap no
request reaches) makes a request's reduction order a function of its own
length only: batch-invariant, what deterministic inference needs.

The partials ([batch, q_heads, max_splits, v_dim] fp32 and the lse) come
from a `DecodeWorkspace` when the caller has one for the step (SGLang's
backend makes one per decode step, `decode_workspace`), else per call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ...runtime import INDEX_DTYPES, plan_cache, use_triton
from ...runtime.capabilities import capabilities, supports_pdl
from ..launch import constexpr_args, run_kernel
from ..loads import masked_load
from ..validation import (
    check_indptr,
    check_slots,
    checked_mode,
    require_number,
    require_same,
    require_same_device,
    require_tensor,
)
from . import reference
from .decode_batch import launch_batch
from .decode_splits import DecodeWorkspace, _plan, check_workspace, split_policy
from .fp8 import check_kv_scales, check_pool_dtypes, kernel_view, kv_format, fp8_unit, kv_values, pool_scores_scale
from .shared import AttentionPlan, check_formulation, check_kv_pool, cdiv, latent_view, needs_int64, window_constexpr
from .tiles import finish_rows, load_tile, online_softmax_update, scale_and_cap, scores

OP = "decode_attention"


@triton.jit
def split_range(kv_len, split, split_tokens, max_splits, WINDOW: tl.constexpr, BLOCK_N: tl.constexpr):
    """Keys [lo, hi) of split `split` of a request with kv_len keys, and the
    number of non-empty splits (both stages compute them the same way)."""
    first = 0
    if WINDOW > 0:  # the query sits at kv_len - 1 and sees WINDOW keys before it
        first = tl.maximum(kv_len - 1 - WINDOW, 0)
    n_keys = kv_len - first
    splits = tl.minimum(tl.maximum(tl.cdiv(n_keys, split_tokens), 1), max_splits)
    split_len = tl.maximum(tl.cdiv(tl.cdiv(n_keys, splits), BLOCK_N), 1) * BLOCK_N
    lo = first + split * split_len
    return lo, tl.minimum(lo + split_len, kv_len), tl.cdiv(n_keys, split_len)


@triton.jit
def decode_tile(q, q_pe, m_i, l_i, acc, kv_row_ptr, k_head_ptr, v_head_ptr, n0, hi, sm_scale, kb_stride_s,
                vb_stride_s, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask, BLOCK_N: tl.constexpr,
                MASK_N: tl.constexpr, MASK_D: tl.constexpr, MASK_DPE: tl.constexpr, MASK_DV: tl.constexpr,
                BLOCK_DPE: tl.constexpr, LOGIT_CAP: tl.constexpr, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr,
                POOL_I64: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr, k_scale, v_scale,
                KV_FORMAT: tl.constexpr, FP8_RUNTIME_UNIT: tl.constexpr, FP8_NAN_ARITH: tl.constexpr, V_IN_K: tl.constexpr):  # fmt: skip
    """Fold keys n0 .. n0 + BLOCK_N (those below `hi` when MASK_N) into the
    running softmax of the group's heads. A split head dim (BLOCK_DPE > 0)
    scores as q[:BLOCK_D].k[:BLOCK_D] + q_pe.k[BLOCK_D:] (MLA: latent + rope).
    V_IN_K (MLA: V is the first BLOCK_D = V_DIM values of each K row) takes
    V as the transposed K tile already loaded: the latent is read once per
    tile, as SGLang's HAS_MLA path does. An fp8 pool's bytes (KV_FORMAT > 0)
    are decoded after the load, unscaled (`fp8.kv_values`): k_scale
    multiplies the scores, v_scale the program's output (its keys are all
    the pool's); KV_FORMAT 0 adds no code."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < hi
    k_unit, v_unit = fp8_unit(k_scale, KV_FORMAT, FP8_RUNTIME_UNIT), fp8_unit(v_scale, KV_FORMAT, FP8_RUNTIME_UNIT)
    if MASK_N:
        slot = masked_load(kv_row_ptr + offs_n, n_mask, 0, LOAD_IGNORES_OTHER)
    else:
        slot = tl.load(kv_row_ptr + offs_n)
    if POOL_I64:
        slot = slot.to(tl.int64)
    k_raw = load_tile(k_head_ptr + offs_d[:, None] + slot[None, :] * kb_stride_s, d_mask, n_mask, MASK_D, MASK_N,
                      LOAD_IGNORES_OTHER)  # fmt: skip
    k_t = kv_values(k_raw, k_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    s = scores(q, k_t, USE_DOT, DOT_FP32)
    if BLOCK_DPE > 0:
        kpe_t = load_tile(k_head_ptr + offs_dpe[:, None] + slot[None, :] * kb_stride_s, dpe_mask, n_mask, MASK_DPE,
                          MASK_N, LOAD_IGNORES_OTHER)  # fmt: skip
        kpe_t = kv_values(kpe_t, k_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
        s += scores(q_pe, kpe_t, USE_DOT, DOT_FP32)
    s = scale_and_cap(s, pool_scores_scale(sm_scale, k_scale, KV_FORMAT), LOGIT_CAP)
    if MASK_N:
        s = tl.where(n_mask[None, :], s, float("-inf"))
    if V_IN_K:
        v = kv_values(tl.trans(k_raw), v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    else:
        v = load_tile(v_head_ptr + slot[:, None] * vb_stride_s + offs_dv[None, :], n_mask, dv_mask, MASK_N, MASK_DV,
                      LOAD_IGNORES_OTHER)  # fmt: skip
        v = kv_values(v, v_unit, q, KV_FORMAT, FP8_NAN_ARITH, USE_DOT, DOT_FP32)
    return online_softmax_update(s, v, m_i, l_i, acc, USE_DOT, DOT_FP32)


@triton.jit(do_not_specialize=["split_tokens", "max_splits"])
def decode_partial_kernel(
    q_ptr,
    k_buffer_ptr,
    v_buffer_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    part_out_ptr,  # [>= batch, num_q_heads, max_splits, V_DIM] fp32
    part_lse_ptr,  # [>= batch, num_q_heads, max_splits] fp32
    sm_scale,
    split_tokens,
    max_splits,
    num_q_heads,
    q_stride_b,
    q_stride_h,
    kb_stride_s,
    kb_stride_h,
    vb_stride_s,
    vb_stride_h,
    k_scale,
    v_scale,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_BLOCKS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOGIT_CAP: tl.constexpr,
    WINDOW: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_FP32: tl.constexpr,
    POOL_I64: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    KV_FORMAT: tl.constexpr,
    FP8_RUNTIME_UNIT: tl.constexpr, FP8_NAN_ARITH: tl.constexpr,
    V_IN_K: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1) // HEAD_BLOCKS  # program 1 axis: (kv head, block of its group's heads)
    h0 = tl.program_id(1) % HEAD_BLOCKS * BLOCK_H
    split = tl.program_id(2)
    kv_start = tl.load(kv_indptr_ptr + b)
    kv_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
    lo, hi, _ = split_range(kv_len, split, split_tokens, max_splits, WINDOW, BLOCK_N)
    if lo >= hi:  # a split this request does not use
        return

    offs_h = h0 + tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_h
    head_mask = offs_h < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_mask = offs_d < HEAD_DIM
    dv_mask = offs_dv < V_DIM
    q_row_ptr = q_ptr + b * q_stride_b + heads[:, None] * q_stride_h
    q = masked_load(q_row_ptr + offs_d[None, :], head_mask[:, None] & d_mask[None, :], 0.0, LOAD_IGNORES_OTHER)
    if BLOCK_DPE > 0:  # the tail of a split head dim (MLA's rope part)
        offs_dpe = BLOCK_D + tl.arange(0, BLOCK_DPE)
        dpe_mask = offs_dpe < HEAD_DIM
        q_pe = masked_load(q_row_ptr + offs_dpe[None, :], head_mask[:, None] & dpe_mask[None, :], 0.0,
                           LOAD_IGNORES_OTHER)  # fmt: skip
    else:
        offs_dpe, dpe_mask, q_pe = offs_d, d_mask, q

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
    kv_row_ptr = kv_indices_ptr + kv_start
    k_head_ptr = k_buffer_ptr + kv_head * kb_stride_h
    v_head_ptr = v_buffer_ptr + kv_head * vb_stride_h
    full_hi = lo + (hi - lo) // BLOCK_N * BLOCK_N
    for n0 in range(lo, full_hi, BLOCK_N):  # whole tiles: no key masks
        m_i, l_i, acc = decode_tile(q, q_pe, m_i, l_i, acc, kv_row_ptr, k_head_ptr, v_head_ptr, n0, hi, sm_scale,
                                    kb_stride_s, vb_stride_s, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask,
                                    BLOCK_N, False, BLOCK_D > HEAD_DIM, BLOCK_D + BLOCK_DPE > HEAD_DIM,
                                    BLOCK_DV != V_DIM, BLOCK_DPE, LOGIT_CAP, USE_DOT, DOT_FP32, POOL_I64,
                                    LOAD_IGNORES_OTHER, k_scale, v_scale, KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, V_IN_K)  # fmt: skip
    # The ragged last tile, as a loop of at most one trip: Triton pipelines a
    # loop's loads into shared memory, where a straight-line tile after the
    # loop would stage them in registers (126 registers instead of 64 on sm_90).
    for n0 in range(full_hi, hi, BLOCK_N):
        m_i, l_i, acc = decode_tile(q, q_pe, m_i, l_i, acc, kv_row_ptr, k_head_ptr, v_head_ptr, n0, hi, sm_scale,
                                    kb_stride_s, vb_stride_s, offs_d, offs_dpe, offs_dv, d_mask, dpe_mask, dv_mask,
                                    BLOCK_N, True, BLOCK_D > HEAD_DIM, BLOCK_D + BLOCK_DPE > HEAD_DIM,
                                    BLOCK_DV != V_DIM, BLOCK_DPE, LOGIT_CAP, USE_DOT, DOT_FP32, POOL_I64,
                                    LOAD_IGNORES_OTHER, k_scale, v_scale, KV_FORMAT, FP8_RUNTIME_UNIT, FP8_NAN_ARITH, V_IN_K)  # fmt: skip

    if KV_FORMAT > 0:  # the fp8 tiles were decoded unscaled (`decode_tile`)
        acc = acc * v_scale
    lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log(tl.where(l_i == 0.0, 1.0, l_i)))
    row = (b.to(tl.int64) * num_q_heads + heads) * max_splits + split  # [BLOCK_H]
    tl.store(part_out_ptr + row[:, None] * V_DIM + offs_dv[None, :], finish_rows(acc, l_i),
             mask=head_mask[:, None] & dv_mask[None, :])  # fmt: skip
    tl.store(part_lse_ptr + row, lse, mask=head_mask)
    if USE_PDL:  # the merge, launched dependent, may start once every program got here
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit(do_not_specialize=["split_tokens", "max_splits"])
def decode_merge_kernel(
    part_out_ptr,
    part_lse_ptr,
    o_ptr,
    kv_indptr_ptr,
    split_tokens,
    max_splits,
    num_q_heads,
    o_stride_b,
    o_stride_h,
    GROUP: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_BLOCKS: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WINDOW: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if USE_PDL:  # launched dependent on stage 1 (sm_90): its partials are complete past this
        tl.extra.cuda.gdc_wait()
    b = tl.program_id(0)
    kv_head = tl.program_id(1) // HEAD_BLOCKS
    h0 = tl.program_id(1) % HEAD_BLOCKS * BLOCK_H
    kv_len = tl.load(kv_indptr_ptr + b + 1) - tl.load(kv_indptr_ptr + b)
    _, _, used = split_range(kv_len, 0, split_tokens, max_splits, WINDOW, BLOCK_N)

    offs_h = h0 + tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_h
    head_mask = offs_h < GROUP
    offs_dv = tl.arange(0, BLOCK_DV)
    part_mask = head_mask[:, None] & (offs_dv < V_DIM)[None, :]
    row = (b.to(tl.int64) * num_q_heads + heads) * max_splits  # [BLOCK_H], split 0
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    den = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
    for split in range(0, used):  # the same online rescale as stage 1, one split at a time
        lse = masked_load(part_lse_ptr + row + split, head_mask, float("-inf"), LOAD_IGNORES_OTHER)
        part = masked_load(part_out_ptr + (row + split)[:, None] * V_DIM + offs_dv[None, :], part_mask, 0.0,
                           LOAD_IGNORES_OTHER)  # fmt: skip
        m_new = tl.maximum(m_i, lse)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        scale = tl.exp(m_i - m_ref)
        w = tl.exp(lse - m_ref)
        acc = acc * scale[:, None] + w[:, None] * part
        den = den * scale + w
        m_i = m_new
    out = finish_rows(acc, den)
    tl.store(o_ptr + b * o_stride_b + heads[:, None] * o_stride_h + offs_dv[None, :],
             out.to(o_ptr.dtype.element_ty), mask=part_mask)  # fmt: skip


# ---- launcher ------------------------------------------------------------


@dataclass(frozen=True)
class DecodeLaunch:
    """A shape class's plan and both kernels' constexprs in signature order
    (`ops.launch`): built once, so a call only computes its grid."""

    plan: AttentionPlan
    head_blocks: int
    merge_head_blocks: int
    partial: tuple
    merge: tuple
    merge_launch: dict  # the plan's launch keywords, plus launch_pdl where the target has PDL


def _launch_plan(config, dtype, head_dim, v_dim, group, formulation, logit_cap, window, pool_i64,
                 fmt=0, v_in_k=False) -> DecodeLaunch:  # fmt: skip
    plan = _plan(config, dtype, head_dim, v_dim, group, formulation)
    # V from the loaded K tile only where that tile is exactly V's (the latent
    # head tile of a split MLA head dim, no padding): else V is loaded as usual.
    v_in_k = v_in_k and plan.block_d == plan.block_dv == v_dim
    # PDL between the stages (sm_90, as SGLang's decode): the merge launches
    # while stage 1 drains and waits on the device for its partials.
    pdl = supports_pdl()
    head_blocks, merge_head_blocks = cdiv(group, plan.block_h), cdiv(group, plan.merge_block_h)
    partial = constexpr_args(
        decode_partial_kernel, GROUP=group, HEAD_DIM=head_dim, V_DIM=v_dim, BLOCK_H=plan.block_h,
        HEAD_BLOCKS=head_blocks, BLOCK_D=plan.block_d, BLOCK_DPE=plan.block_dpe, BLOCK_DV=plan.block_dv,
        BLOCK_N=plan.block_n, LOGIT_CAP=logit_cap, WINDOW=window, USE_DOT=plan.use_dot, DOT_FP32=plan.dot_fp32,
        POOL_I64=pool_i64, LOAD_IGNORES_OTHER=plan.load_ignores_other, KV_FORMAT=fmt,
        FP8_RUNTIME_UNIT=bool(fmt) and plan.fp8_runtime_unit,
        FP8_NAN_ARITH=bool(fmt) and capabilities().fp8_nan_by_arithmetic, V_IN_K=v_in_k,
        USE_PDL=pdl)  # fmt: skip
    merge = constexpr_args(
        decode_merge_kernel, GROUP=group, V_DIM=v_dim, BLOCK_H=plan.merge_block_h, HEAD_BLOCKS=merge_head_blocks,
        BLOCK_DV=plan.merge_block_dv, BLOCK_N=plan.block_n, WINDOW=window,
        LOAD_IGNORES_OTHER=plan.load_ignores_other, USE_PDL=pdl)  # fmt: skip
    merge_launch = {**plan.launch, "launch_pdl": True} if pdl else plan.launch
    return DecodeLaunch(plan, head_blocks, merge_head_blocks, partial, merge, merge_launch)


@plan_cache
def _cached_launch_plan(*args) -> DecodeLaunch:
    return _launch_plan(None, *args)


def _validate(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, workspace):
    require_tensor(OP, "q", q, ndim=3)
    require_tensor(OP, "o", o, ndim=3)
    require_tensor(OP, "kv_indptr", kv_indptr, dtypes=INDEX_DTYPES, ndim=1)
    require_tensor(OP, "kv_indices", kv_indices, dtypes=INDEX_DTYPES, ndim=1)
    group = check_kv_pool(OP, q.shape[1], q.shape[2], k_buffer, v_buffer, "q")
    require_same(OP, "dtypes", q=q.dtype, o=o.dtype)
    check_pool_dtypes(OP, q.dtype, k_buffer, v_buffer)
    require_same(OP, "o's shape and (batch, q heads, v head dim)", o=tuple(o.shape), expected=(q.shape[0], q.shape[1], v_buffer.shape[2]))
    require_same_device(OP, q=q, k_buffer=k_buffer, v_buffer=v_buffer, o=o, kv_indptr=kv_indptr, kv_indices=kv_indices)
    if workspace is not None:
        check_workspace(workspace, q.shape[0], q.shape[1], v_buffer.shape[2], q.device)
    indptr = check_indptr(OP, "kv_indptr", kv_indptr, q.shape[0], kv_indices.numel(), "len(kv_indices)")
    check_slots(OP, "kv_indices", kv_indices, k_buffer.shape[0], int(indptr[-1]))
    return group


def decode_attention(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    o: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    logit_cap: float = 0.0,
    sliding_window: int | None = None,
    num_kv_splits: int | None = None,
    check: bool = True,
    formulation: str | None = None,
    *,
    split_tile_size: int | None = None,
    workspace: DecodeWorkspace | None = None,
    k_scale: float | None = None,
    v_scale: float | None = None,
    config: dict | None = None,
) -> torch.Tensor:
    """Attention of one new token per request over its cached keys; writes `o`.

    q [batch, q_heads, head_dim]; k_buffer [slots, kv_heads, head_dim] and
    v_buffer [slots, kv_heads, v_head_dim] (one layer's KV pool); o [batch,
    q_heads, v_head_dim]. Request b's keys are the slots
    kv_indices[kv_indptr[b]:kv_indptr[b+1]] in position order, the query's
    own token last (store_kv runs first). q_heads must be a multiple of
    kv_heads (MHA, GQA, MQA). `logit_cap` > 0 applies cap * tanh(s / cap);
    `sliding_window` is SGLang's sliding_window_size (the query sees itself
    and the `sliding_window` tokens before it). A request with no keys gets
    zeros. Returns `o`. An fp8 pool (float8_e4m3fn / float8_e5m2, written
    by `store_kv`) is decoded inside the loop with integer operations, its
    values its bytes times `k_scale` / `v_scale` (1.0 by default).

    Splits (see the module docstring): the config's policy, at most
    `num_kv_splits` per request, or fixed tiles of `split_tile_size` keys
    (batch-invariant results); `workspace` brings the partial buffers and
    the split plan instead (`decode_workspace`). `formulation` ("dot" |
    "sum") overrides the config's.

    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips every input check,
    the metadata reads that sync the host included: the launcher then does
    only what the launch needs, and bad metadata (indptr out of order, slot
    ids outside the pool) reads or writes unrelated memory. SGLang's backend
    runs unchecked: its metadata comes from its own allocator and indptr
    builder.
    """
    if checked_mode(check):
        group = _validate(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, workspace)
        sm_scale = require_number(OP, "sm_scale", sm_scale, above=0.0)
        logit_cap = require_number(OP, "logit_cap", 0.0 if logit_cap is None else logit_cap, minimum=0.0)
        window = window_constexpr(OP, sliding_window)
        check_formulation(OP, formulation)
        if num_kv_splits is not None:
            num_kv_splits = require_number(OP, "num_kv_splits", num_kv_splits, minimum=1, integer=True)
        if split_tile_size is not None:
            split_tile_size = require_number(OP, "split_tile_size", split_tile_size, minimum=1, integer=True)
        if workspace is not None and (num_kv_splits or split_tile_size):
            raise ValueError(f"{OP}: a workspace brings its own split plan; drop num_kv_splits / split_tile_size")
        k_scale, v_scale = check_kv_scales(OP, k_buffer.dtype, k_scale, v_scale)
        tensors = (q, k_buffer, v_buffer, o, kv_indptr, kv_indices)
    else:
        group = q.shape[1] // k_buffer.shape[1]
        sm_scale, logit_cap = float(sm_scale), float(logit_cap or 0.0)
        window = sliding_window if sliding_window is not None and sliding_window > 0 else 0
        k_scale, v_scale = float(k_scale or 1.0), float(v_scale or 1.0)
        tensors = (q,)
    batch, q_heads, head_dim = q.shape
    if batch == 0:
        return o
    if not use_triton(OP, *tensors):
        return reference.decode_attention(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale, logit_cap, window,
                                          k_scale, v_scale)  # fmt: skip

    kv_heads, v_dim = k_buffer.shape[1], v_buffer.shape[2]
    pool_i64, fmt, v_in_k = needs_int64(k_buffer, v_buffer), kv_format(k_buffer.dtype), latent_view(k_buffer, v_buffer)
    shape_class = (q.dtype, head_dim, v_dim, group, formulation, logit_cap, window, pool_i64, fmt, v_in_k)
    launch = _cached_launch_plan(*shape_class) if config is None else _launch_plan(config, *shape_class)
    plan = launch.plan
    if workspace is None:
        total = kv_indices.shape[0]  # bounds the longest request: no split beyond it is ever used
        split_tokens, max_splits = split_policy(plan, batch, kv_heads * launch.head_blocks, num_kv_splits, split_tile_size,
                                                total)  # fmt: skip
        max_splits = max(1, min(max_splits, cdiv(total, split_tokens)))
        part_out = q.new_empty(batch, q_heads, max_splits, v_dim, dtype=torch.float32)
        part_lse = q.new_empty(batch, q_heads, max_splits, dtype=torch.float32)
    else:
        part_out, part_lse, split_tokens = workspace.part_out, workspace.part_lse, workspace.split_tokens
        max_splits = part_out.shape[2]
    if max_splits == 1 and plan.batch_rows and not v_in_k:
        # One split per request and the interpreter's plan: one program folds
        # many (request, kv head) rows at once (decode_batch.py).
        launch_batch(plan, q, kernel_view(k_buffer), kernel_view(v_buffer), o, kv_indptr, kv_indices, sm_scale,
                     logit_cap, window, pool_i64, fmt, k_scale, v_scale)  # fmt: skip
        return o
    if max_splits == 1 and plan.direct_single_split and o.is_contiguous():
        # One split per request: its normalised output is the answer (the
        # merge would scale it by e^0 / 1), so stage 1 stores it into `o`
        # (row (b * q_heads + head) * 1 + 0 is o's row) and nothing merges.
        # Requests without keys write nothing there: zeros, as the merge's.
        o.zero_()
        part_out = o
        launch_merge = False
    else:
        launch_merge = True
    run_kernel(decode_partial_kernel,
        q, kernel_view(k_buffer), kernel_view(v_buffer), kv_indptr, kv_indices, part_out, part_lse,
        sm_scale, split_tokens, max_splits, q_heads,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        k_scale, v_scale, *launch.partial, grid=(batch, kv_heads * launch.head_blocks, max_splits), **plan.launch,
    )  # fmt: skip
    if launch_merge:
        run_kernel(decode_merge_kernel,
            part_out, part_lse, o, kv_indptr, split_tokens, max_splits, q_heads, o.stride(0), o.stride(1),
            *launch.merge, grid=(batch, kv_heads * launch.merge_head_blocks), **launch.merge_launch,
        )  # fmt: skip
    return o
