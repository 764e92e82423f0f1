"""Scatter new tokens' K and V rows into their KV-pool slots.

    k_buffer[out_cache_loc[t], h, :] = k[t, h, :]    (and the same for v)

A program copies TOKENS_PER_PROGRAM tokens (Kunlun launch cost is ~0.6-0.9 us
per program, so one token per program would be launch-bound). A token's K row
is viewed as one flat run of HEADS * HEAD_DIM values, copied in column chunks
of BLOCK_C; heads may be strided in the source (a slice of a fused qkv
projection), so the flat column c maps to head c // HEAD_DIM, dim c % HEAD_DIM.
"""

import triton
import triton.language as tl


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
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    for c0 in range(0, HEADS * HEAD_DIM, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        col_mask = cols < HEADS * HEAD_DIM
        head = cols // HEAD_DIM
        dim = cols % HEAD_DIM
        mask = token_mask[:, None] & col_mask[None, :]
        src = src_ptr + tokens[:, None].to(tl.int64) * src_stride_t + (head * src_stride_h + dim)[None, :]
        dst = dst_ptr + loc[:, None].to(tl.int64) * dst_stride_s + (head * dst_stride_h + dim)[None, :]
        rows = tl.load(src, mask=mask)
        tl.store(dst, rows.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
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
    HEADS: tl.constexpr,
    K_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    TOKENS_PER_PROGRAM: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    tokens = tl.program_id(0) * TOKENS_PER_PROGRAM + tl.arange(0, TOKENS_PER_PROGRAM)
    token_mask = tokens < num_tokens
    loc = tl.load(loc_ptr + tokens, mask=token_mask)
    loc = tl.where(token_mask, loc, 0)
    copy_rows_to_slots(
        k_ptr, k_buffer_ptr, loc, tokens, token_mask, k_stride_t, k_stride_h, kb_stride_s, kb_stride_h,
        HEADS, K_DIM, BLOCK_C,
    )
    copy_rows_to_slots(
        v_ptr, v_buffer_ptr, loc, tokens, token_mask, v_stride_t, v_stride_h, vb_stride_s, vb_stride_h,
        HEADS, V_DIM, BLOCK_C,
    )
