"""`store_kv`: scatter new tokens' K and V rows into their KV-pool slots.

    k_buffer[out_cache_loc[t], h, :] = k[t, h, :]    (and the same for v)

A program copies TOKENS_PER_PROGRAM tokens (Kunlun launch cost is ~0.6-0.9 us
per program, so one token per program would be launch-bound). A token's K row
is viewed as one flat run of HEADS * HEAD_DIM values, copied in column chunks
of BLOCK_C; heads may be strided in the source (a slice of a fused qkv
projection), so the flat column c maps to head c // HEAD_DIM, dim c % HEAD_DIM.

An fp8 pool (``float8_e4m3fn`` / ``float8_e5m2``: SGLang's fp8 KV cache)
stores encode(x / scale) per value, encoded with integer operations (`fp8`:
round to nearest even, torch's saturation and NaN rules), with
k_scale / v_scale SGLang's per-layer scales (1.0 when the checkpoint has none).
"""

from dataclasses import dataclass

import triton
import triton.language as tl

from ...runtime import INDEX_DTYPES, capabilities, launch_options, plan_cache, use_triton
from ..spec import explicit_config, lookup_config
from ..launch import KernelLaunch, constexpr_args, run_keywords
from ..loads import masked_load
from ..validation import check_slots, checked_mode, require_same, require_same_device, require_tensor
from . import reference
from .fp8 import KV_POOL_DTYPES, check_kv_scales, encode_values, kernel_view, kv_format
from .shared import next_power_of_2

OP = "store_kv"
FP8_ENCODE_VALUES = 4096  # values a program encodes per column chunk into an fp8 pool (at most)


@triton.jit
def copy_rows_to_slots(
    src_ptr,
    dst_ptr,
    loc,  # [T] slot ids, already loaded
    tokens,  # [T] token ids
    token_mask,
    src_stride_t,
    src_stride_h,
    dst_stride_s,
    dst_stride_h,
    scale,
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_C: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    KV_FORMAT: tl.constexpr,
):
    for c0 in range(0, HEADS * HEAD_DIM, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        col_mask = cols < HEADS * HEAD_DIM
        head = cols // HEAD_DIM
        dim = cols % HEAD_DIM
        mask = token_mask[:, None] & col_mask[None, :]
        src = src_ptr + tokens[:, None].to(tl.int64) * src_stride_t + (head * src_stride_h + dim)[None, :]
        dst = dst_ptr + loc[:, None].to(tl.int64) * dst_stride_s + (head * dst_stride_h + dim)[None, :]
        rows = masked_load(src, mask, 0.0, LOAD_IGNORES_OTHER)  # masked lanes are never stored
        tl.store(dst, encode_values(rows, scale, KV_FORMAT).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["num_tokens"])
def store_kv_kernel(
    k_ptr,
    v_ptr,
    k_buffer_ptr,
    v_buffer_ptr,
    loc_ptr,
    num_tokens,
    k_stride_t,
    k_stride_h,
    v_stride_t,
    v_stride_h,
    kb_stride_s,
    kb_stride_h,
    vb_stride_s,
    vb_stride_h,
    k_scale,
    v_scale,
    HEADS: tl.constexpr,
    K_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    TOKENS_PER_PROGRAM: tl.constexpr,
    BLOCK_C: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    KV_FORMAT: tl.constexpr,
):
    tokens = tl.program_id(0) * TOKENS_PER_PROGRAM + tl.arange(0, TOKENS_PER_PROGRAM)
    token_mask = tokens < num_tokens
    loc = masked_load(loc_ptr + tokens, token_mask, 0, LOAD_IGNORES_OTHER)
    copy_rows_to_slots(
        k_ptr, k_buffer_ptr, loc, tokens, token_mask, k_stride_t, k_stride_h, kb_stride_s, kb_stride_h, k_scale,
        HEADS, K_DIM, BLOCK_C, LOAD_IGNORES_OTHER, KV_FORMAT,
    )
    copy_rows_to_slots(
        v_ptr, v_buffer_ptr, loc, tokens, token_mask, v_stride_t, v_stride_h, vb_stride_s, vb_stride_h, v_scale,
        HEADS, V_DIM, BLOCK_C, LOAD_IGNORES_OTHER, KV_FORMAT,
    )


@dataclass(frozen=True)
class CopyPlan:
    tokens_per_program: int
    launch: KernelLaunch  # the kernel with its constexprs and options (`ops.launch`)


def _copy_plan(heads: int, k_dim: int, v_dim: int, config: dict, fmt: int = 0) -> CopyPlan:
    per_program = int(config["TOKENS_PER_PROGRAM"])  # defaults: autotune_configs/default.yaml
    block_c = min(next_power_of_2(heads * max(k_dim, v_dim)), int(config["MAX_BLOCK_C"]))
    if fmt:  # the fp8 encoder's temporaries: 16 x 1024 values a program spill 744 B on sm_90, 4 x 1024 none
        block_c = max(min(block_c, 1 << (max(FP8_ENCODE_VALUES // per_program, 1).bit_length() - 1)), 16)
    constexprs = constexpr_args(store_kv_kernel, HEADS=heads, K_DIM=k_dim, V_DIM=v_dim, TOKENS_PER_PROGRAM=per_program,
                                BLOCK_C=block_c, LOAD_IGNORES_OTHER=capabilities().load_ignores_other,
                                KV_FORMAT=fmt)  # fmt: skip
    return CopyPlan(per_program, KernelLaunch(store_kv_kernel, constexprs, run_keywords(launch_options(config))))


@plan_cache
def _cached_plan(tokens: int, heads: int, k_dim: int, v_dim: int, fmt: int) -> CopyPlan:
    return _copy_plan(heads, k_dim, v_dim, lookup_config(OP, row_width=heads * k_dim, tokens=tokens), fmt)


def store_kv(k, v, k_buffer, v_buffer, out_cache_loc, check: bool = True, *, k_scale: float | None = None,
             v_scale: float | None = None, config: dict | None = None) -> None:  # fmt: skip
    """k_buffer[out_cache_loc[t]] = k[t] and v_buffer[out_cache_loc[t]] = v[t].

    k [tokens, kv_heads, head_dim] and v [tokens, kv_heads, v_head_dim] may
    have strided tokens and heads (views into a fused projection); values are
    cast to the pool's dtype; an fp8 pool (float8_e4m3fn / float8_e5m2) gets
    the fp8 bytes of k / k_scale and v / v_scale (scales default to 1.0;
    refused for other pools). out_cache_loc [tokens] int32/int64 slot ids,
    which must be distinct (the write order of duplicates is unspecified).

    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips every input check,
    the slot range read (a host sync) included: a slot id outside the pool
    then writes unrelated memory. SGLang's allocator hands out valid slots.
    """
    if checked_mode(check):
        require_tensor(OP, "k", k, ndim=3)
        require_tensor(OP, "v", v, ndim=3)
        require_tensor(OP, "k_buffer", k_buffer, dtypes=KV_POOL_DTYPES, ndim=3)
        require_tensor(OP, "v_buffer", v_buffer, dtypes=KV_POOL_DTYPES, ndim=3)
        if kv_format(k_buffer.dtype) != kv_format(v_buffer.dtype):
            raise TypeError(f"{OP}: k_buffer ({k_buffer.dtype}) and v_buffer ({v_buffer.dtype}) must both be fp8 "
                            "of one format or neither")  # fmt: skip
        k_scale, v_scale = check_kv_scales(OP, k_buffer.dtype, k_scale, v_scale)
        require_tensor(OP, "out_cache_loc", out_cache_loc, dtypes=INDEX_DTYPES, ndim=1)
        require_same(OP, "k_buffer and v_buffer slot/head counts",
                     k_buffer=tuple(k_buffer.shape[:2]), v_buffer=tuple(v_buffer.shape[:2]))
        require_same(OP, "k's shape and (tokens, pool kv heads, pool head dim)", k=tuple(k.shape),
                     expected=(out_cache_loc.numel(), k_buffer.shape[1], k_buffer.shape[2]))
        require_same(OP, "v's shape and (tokens, pool kv heads, pool v head dim)", v=tuple(v.shape),
                     expected=(out_cache_loc.numel(), v_buffer.shape[1], v_buffer.shape[2]))
        require_same_device(OP, k=k, v=v, k_buffer=k_buffer, v_buffer=v_buffer, out_cache_loc=out_cache_loc)
        check_slots(OP, "out_cache_loc", out_cache_loc, k_buffer.shape[0])
        tensors = (k, v, k_buffer, v_buffer, out_cache_loc)
    else:
        tensors = (k,)
        k_scale, v_scale = float(k_scale or 1.0), float(v_scale or 1.0)
    tokens, heads, k_dim = k.shape
    if tokens == 0:
        return
    if not use_triton(OP, *tensors):
        reference.store_kv(k, v, k_buffer, v_buffer, out_cache_loc, k_scale, v_scale)
        return
    v_dim = v.shape[2]
    fmt = kv_format(k_buffer.dtype)
    if config is None:
        plan = _cached_plan(tokens, heads, k_dim, v_dim, fmt)
    else:
        plan = _copy_plan(heads, k_dim, v_dim, explicit_config(OP, config, row_width=heads * k_dim, tokens=tokens), fmt)
    # (a stride() tuple indexed twice: half the cost of two stride(i) calls)
    ks, vs, kbs, vbs = k.stride(), v.stride(), k_buffer.stride(), v_buffer.stride()
    plan.launch((-(-tokens // plan.tokens_per_program),),
        k, v, kernel_view(k_buffer), kernel_view(v_buffer), out_cache_loc, tokens, ks[0], ks[1], vs[0], vs[1],
        kbs[0], kbs[1], vbs[0], vbs[1], k_scale, v_scale)  # fmt: skip
