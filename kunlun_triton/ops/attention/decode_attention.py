"""`decode_attention`: split-KV paged attention, one query token per request.

Two stages (the kernels and their math: `decode_kernels`): stage 1 folds
each split of a request's keys into a normalised output and its
log-sum-exp, for all query heads of a kv head at once; stage 2 merges the
splits. This module plans and launches them.

With one split per request and ``DIRECT_SINGLE_SPLIT`` in the config (the
interpreter's plan), stage 1 writes `o` itself and stage 2 is not launched.

Split counts are decided on the device, per request, from its length and
two run-time integers (`decode_kernels.split_range`: never constexprs, so
neither batch size nor context length ever recompiles a kernel, and a CUDA
graph can replay any lengths).

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

from ...runtime import INDEX_DTYPES, plan_cache, use_triton
from ...runtime.capabilities import supports_pdl
from ..launch import KernelLaunch, constexpr_args
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
from .decode_kernels import decode_merge_kernel, decode_partial_kernel
from .decode_splits import DecodeWorkspace, _plan, check_workspace, split_policy
from .fp8 import check_kv_scales, check_pool_dtypes, kernel_view, kv_format, read_constexprs
from .shared import (AttentionPlan, check_formulation, check_kv_pool, check_sinks, cdiv, latent_view, needs_int64,
                     window_constexpr)  # fmt: skip

OP = "decode_attention"


@dataclass(frozen=True)
class DecodeLaunch:
    """A shape class's plan and both kernels with their constexprs and
    options (`ops.launch`): built once, so a call only computes its grid."""

    plan: AttentionPlan
    head_blocks: int
    merge_head_blocks: int
    partial: KernelLaunch
    merge: KernelLaunch  # the plan's launch keywords, plus launch_pdl where the target has PDL


def _launch_plan(config, dtype, head_dim, v_dim, group, formulation, logit_cap, window, pool_i64,
                 fmt=0, v_in_k=False, has_sinks=False) -> DecodeLaunch:  # fmt: skip
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
        POOL_I64=pool_i64, LOAD_IGNORES_OTHER=plan.load_ignores_other,
        **read_constexprs(fmt, plan.fp8_runtime_unit), V_IN_K=v_in_k, K_KEY_MAJOR=plan.k_key_major,
        PREFETCH_SLOTS=plan.prefetch_slots,
        USE_PDL=pdl)  # fmt: skip
    merge = constexpr_args(
        decode_merge_kernel, GROUP=group, V_DIM=v_dim, BLOCK_H=plan.merge_block_h, HEAD_BLOCKS=merge_head_blocks,
        BLOCK_DV=plan.merge_block_dv, BLOCK_N=plan.block_n, WINDOW=window,
        LOAD_IGNORES_OTHER=plan.load_ignores_other, HAS_SINKS=has_sinks, USE_PDL=pdl)  # fmt: skip
    merge_launch = {**plan.launch, "launch_pdl": True} if pdl else plan.launch
    return DecodeLaunch(plan, head_blocks, merge_head_blocks, KernelLaunch(decode_partial_kernel, partial, plan.launch),
                        KernelLaunch(decode_merge_kernel, merge, merge_launch))  # fmt: skip


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
    sinks: torch.Tensor | None = None,
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
    `sinks` [q_heads] (float; gpt-oss's attention sinks, as SGLang's Triton
    backend passes them): head h's softmax denominator gains e^(sinks[h]),
    a term with no value (`reference`); the merge adds it once per head.

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
        check_sinks(OP, sinks, q.shape[1], q.device)
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
                                          k_scale, v_scale, sinks)  # fmt: skip

    kv_heads, v_dim = k_buffer.shape[1], v_buffer.shape[2]
    pool_i64, fmt, v_in_k = needs_int64(k_buffer, v_buffer), kv_format(k_buffer.dtype), latent_view(k_buffer, v_buffer)
    has_sinks = sinks is not None
    shape_class = (q.dtype, head_dim, v_dim, group, formulation, logit_cap, window, pool_i64, fmt, v_in_k, has_sinks)
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
                     logit_cap, window, pool_i64, fmt, k_scale, v_scale, sinks)  # fmt: skip
        return o
    if max_splits == 1 and plan.direct_single_split and o.is_contiguous() and not has_sinks:
        # One split per request: its normalised output is the answer (the
        # merge would scale it by e^0 / 1), so stage 1 stores it into `o`
        # (row (b * q_heads + head) * 1 + 0 is o's row) and nothing merges.
        # Requests without keys write nothing there: zeros, as the merge's.
        # (Sinks are the merge's: with them it runs.)
        o.zero_()
        part_out = o
        launch_merge = False
    else:
        launch_merge = True
    # (a stride() tuple indexed twice: half the cost of two stride(i) calls)
    qs, kbs, vbs = q.stride(), k_buffer.stride(), v_buffer.stride()
    launch.partial.run(decode_partial_kernel, (batch, kv_heads * launch.head_blocks, max_splits),
        q, kernel_view(k_buffer), kernel_view(v_buffer), kv_indptr, kv_indices, part_out, part_lse,
        sm_scale, split_tokens, max_splits, q_heads, qs[0], qs[1], kbs[0], kbs[1], vbs[0], vbs[1],
        k_scale, v_scale)  # fmt: skip
    if launch_merge:
        os_ = o.stride()
        launch.merge.run(decode_merge_kernel, (batch, kv_heads * launch.merge_head_blocks),
            part_out, part_lse, o, kv_indptr, kv_indptr if sinks is None else sinks, split_tokens, max_splits, q_heads,
            os_[0], os_[1])  # fmt: skip
    return o
