"""`extend_attention`: paged extend (prefill / chunked prefill / radix-cache hit) attention.

The launcher: checks, the plan of a shape class (tiles, constexprs), the
grid (batch, q_heads, cdiv(max_len_extend, BLOCK_M)) and the torch fallback.
The kernels and their math (the two key streams, unified mode, target
verify's mask, MLA's latent read once): `extend_kernels`.
"""

import dataclasses

import torch

from ...runtime import plan_cache, use_triton
from ..spec import explicit_config, lookup_config
from ..launch import KernelLaunch, constexpr_args
from ..validation import checked_mode, require_number
from . import reference
from .custom_mask import check_custom_mask, mask_mode
from .extend_inputs import latent_flags, validate
from .extend_kernels import extend_kernel
from .fp8 import check_kv_scales, kernel_view, kv_format, read_constexprs
from .shared import AttentionPlan, attention_plan, cdiv, check_formulation, check_sinks, needs_int64, window_constexpr

OP = "extend_attention"


def _launch_plan(config, dtype, head_dim, v_dim, group, formulation, logit_cap, window, index_i64, unified, fmt=0,
                 custom_mask=False, v_in_k=False, new_v_in_k=False, has_sinks=False):  # fmt: skip
    """(plan, extend_kernel with its constexprs and options: `ops.launch`)
    of a shape class."""
    if config is None:
        config = lookup_config(OP, head_dim=head_dim, group=group)
    else:
        config = explicit_config(OP, config, head_dim=head_dim, group=group)
    if custom_mask:
        # Target verify scores a few draft tokens (4..64) over a long prefix:
        # a short row tile wastes fewer padding rows per key and keeps the
        # mask tile in registers (sm_90, bf16, 32 q / 8 kv heads of 128,
        # `inspect --shape custom_mask=1`: 128 x 64 spills 560 bytes, 32 x 64
        # none, and its prefix loop costs 5.4 SASS per key against SGLang's
        # 10.8; docs/speculative.md).
        verify = {"BLOCK_M": config.get("VERIFY_BLOCK_M"), "BLOCK_N": config.get("VERIFY_BLOCK_N"),
                  "num_warps": config.get("VERIFY_NUM_WARPS")}  # fmt: skip
        config = {**config, **{k: int(v) for k, v in verify.items() if v}}
    plan = attention_plan(OP, config, dtype, head_dim, v_dim, group, formulation)
    if fmt and config.get("FP8_KV_BLOCK_N"):  # the decoded fp8 tiles need registers of their own
        plan = dataclasses.replace(plan, block_n=max(int(config["FP8_KV_BLOCK_N"]), 16 if plan.use_dot else 1))
    # V from the loaded K tile only where that tile is exactly V's (the latent
    # head tile of a split MLA head dim, no padding), as decode does.
    latent = plan.block_d == plan.block_dv == v_dim
    constexprs = constexpr_args(
        extend_kernel, GROUP=group, HEAD_DIM=head_dim, V_DIM=v_dim, BLOCK_M=plan.block_m, BLOCK_N=plan.block_n,
        BLOCK_D=plan.block_d, BLOCK_DPE=plan.block_dpe, BLOCK_DV=plan.block_dv, LOGIT_CAP=logit_cap, WINDOW=window,
        USE_DOT=plan.use_dot, DOT_FP32=plan.dot_fp32, INDEX_I64=index_i64, LOAD_IGNORES_OTHER=plan.load_ignores_other,
        UNIFIED=unified, SCREEN_INLINE=not plan.use_dot or plan.block_d + plan.block_dpe > 256,
        **read_constexprs(fmt, plan.fp8_runtime_unit), CUSTOM_MASK=custom_mask,
        V_IN_K=v_in_k and latent,
        NEW_V_IN_K=new_v_in_k and latent and not unified, HAS_SINKS=has_sinks)  # fmt: skip
    return plan, KernelLaunch(extend_kernel, constexprs, plan.launch)


@plan_cache
def _cached_launch_plan(*args) -> tuple[AttentionPlan, KernelLaunch]:
    return _launch_plan(None, *args)


def extend_attention(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float = 0.0,
    sliding_window: int | None = None,
    check: bool = True,
    formulation: str | None = None,
    *,
    unified_kv: bool = False,
    k_scale: float | None = None,
    v_scale: float | None = None,
    config: dict | None = None,
    custom_mask: torch.Tensor | None = None,
    mask_indptr: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention for a batch of extends; writes `o_extend`.

    Request b's new tokens are rows qo_indptr[b]:qo_indptr[b+1] of q_extend
    [tokens, q_heads, head_dim], k_extend / v_extend [tokens, kv_heads, dim]
    and o_extend [tokens, q_heads, v_head_dim]. Its cached prefix is the pool
    slots kv_indices[kv_indptr[b]:kv_indptr[b+1]] (PREFIX ONLY: the new
    tokens come from k_extend / v_extend, even when store_kv already wrote
    them to the pool). New token m (position prefix + m) sees the whole
    prefix and new tokens 0..m. `max_len_extend` bounds every request's new
    token count (it sizes the grid; checked mode verifies it). `logit_cap`,
    `sliding_window` and `formulation` as in `decode_attention`. Returns
    `o_extend`.

    ``unified_kv=True`` (deterministic inference): kv_indices list request
    b's WHOLE sequence (prefix, then its new tokens, already in the pool) and
    k_extend / v_extend are not read; keys are folded on a fixed tile grid
    from position 0, so a row's output is bitwise the same however the
    sequence was split into cached prefix and extend (`extend_kernels`).

    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips every input check,
    the metadata reads that sync the host included; bad metadata then reads
    or writes unrelated memory.

    An fp8 pool (float8_e4m3fn / float8_e5m2, written by `store_kv`) is
    decoded inside the loop as its bytes times `k_scale` / `v_scale` (1.0
    by default); k_extend / v_extend stay in the compute dtype.

    Target verify (speculative decoding): `custom_mask` (flat bool / uint8,
    SGLang's layout) holds request b's extend_len x (prefix_len + extend_len)
    row-major block from custom_mask[mask_indptr[b]]; new token m sees new
    token n <= m only where block[m, prefix_len + n] is nonzero, and a key
    it does not see never reaches it, whatever its K / V hold. The prefix
    columns are not read (SGLang's skip_prefix_custom_mask=True, how its
    TARGET_VERIFY runs: they may be uninitialised): every new token sees the
    whole cached prefix. A draft tree lists parents before children, so its
    mask is lower-triangular; entries above the diagonal are ignored. Both
    None (default): causal, compiled exactly as before (a constexpr). Not
    with `sliding_window` or `unified_kv`.

    `sinks` [q_heads] (float; gpt-oss's attention sinks, as SGLang's Triton
    backend passes them): head h's softmax denominator gains e^(sinks[h]),
    a term with no value, once per new token (`reference`).
    """
    masked = mask_mode(OP, custom_mask, mask_indptr, sliding_window, unified_kv)
    if checked_mode(check):
        max_len_extend = require_number(OP, "max_len_extend", max_len_extend, minimum=0, integer=True)
        group, batch, qo, kv = validate(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                                         qo_indptr, kv_indptr, kv_indices, max_len_extend, unified_kv)  # fmt: skip
        if masked:
            check_custom_mask(OP, custom_mask, mask_indptr, q_extend, batch, qo, kv)
        sm_scale = require_number(OP, "sm_scale", sm_scale, above=0.0)
        logit_cap = require_number(OP, "logit_cap", 0.0 if logit_cap is None else logit_cap, minimum=0.0)
        window = window_constexpr(OP, sliding_window)
        check_formulation(OP, formulation)
        k_scale, v_scale = check_kv_scales(OP, k_buffer.dtype, k_scale, v_scale)
        check_sinks(OP, sinks, q_extend.shape[1], q_extend.device)
        tensors = (q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices)
    else:
        group, batch = q_extend.shape[1] // k_buffer.shape[1], qo_indptr.shape[0] - 1
        sm_scale, logit_cap = float(sm_scale), float(logit_cap or 0.0)
        window = sliding_window if sliding_window is not None and sliding_window > 0 else 0
        k_scale, v_scale = float(k_scale or 1.0), float(v_scale or 1.0)
        tensors = (q_extend,)
    tokens, q_heads, head_dim = q_extend.shape
    if batch <= 0 or tokens == 0 or max_len_extend <= 0:
        return o_extend
    if not use_triton(OP, *tensors):
        if unified_kv:
            return reference.extend_attention_unified(q_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
                                                      kv_indices, sm_scale, logit_cap, window, k_scale, v_scale,
                                                      sinks)  # fmt: skip
        return reference.extend_attention(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr,
                                          kv_indptr, kv_indices, max_len_extend, sm_scale, logit_cap, window,
                                          k_scale, v_scale, custom_mask, mask_indptr, sinks)  # fmt: skip

    v_dim = v_buffer.shape[2]
    shape_class = (q_extend.dtype, head_dim, v_dim, group, formulation, logit_cap, window,
                   needs_int64(k_buffer, v_buffer, k_extend, v_extend), bool(unified_kv), kv_format(k_buffer.dtype),
                   masked, *latent_flags(k_buffer, v_buffer, k_extend, v_extend), sinks is not None)  # fmt: skip
    plan, launch = _cached_launch_plan(*shape_class) if config is None else _launch_plan(config, *shape_class)
    # unified: a request's new tokens may start mid-block, one block more
    row_blocks = cdiv(max_len_extend, plan.block_m) + (1 if unified_kv else 0)
    # No mask: kv_indptr stands in for both pointers (never read; no new specialisation).
    mask, mask_starts = (custom_mask.view(torch.uint8), mask_indptr) if masked else (kv_indptr, kv_indptr)
    # (a stride() tuple indexed twice: half the cost of two stride(i) calls)
    qs, ks, vs, os_, kbs, vbs = (q_extend.stride(), k_extend.stride(), v_extend.stride(), o_extend.stride(),
                                 k_buffer.stride(), v_buffer.stride())  # fmt: skip
    launch((batch, q_heads, row_blocks),
        q_extend, k_extend, v_extend, o_extend, kernel_view(k_buffer), kernel_view(v_buffer), qo_indptr, kv_indptr,
        kv_indices, mask, mask_starts, kv_indptr if sinks is None else sinks, sm_scale, qs[0], qs[1], ks[0], ks[1], vs[0], vs[1], os_[0], os_[1],
        kbs[0], kbs[1], vbs[0], vbs[1], k_scale, v_scale)  # fmt: skip
    return o_extend
