"""Rotary position embedding, in place on query and key.

For each token t at position p = positions[t], with cos/sin from row p of the
cache ([cos | sin], each ROT_HALF = rotary_dim / 2 wide), every head's first
rotary_dim features are rotated pairwise:

    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin

NeoX layout pairs feature i with i + ROT_HALF; GPT-J layout pairs 2i with
2i + 1. Features past rotary_dim are left untouched.

Grid: (token tiles, head groups). A program takes TOKENS_PER_PROGRAM tokens,
loads their cos/sin once and applies them to HEADS_PER_PROGRAM heads of the
query-then-key head sequence (a [tokens, ROT_HALF] tile per head). On a GPU,
head groups give a decode batch of one token enough programs; on Kunlun,
HEADS_PER_PROGRAM covering every head makes one program per token tile, so
cos/sin are read once per token and launches stay few. Masked lanes are never
stored, and positions of masked tokens are zeroed before they index the cache,
so no correctness rests on ``other=``; loads go through `masked_load`
(``tl.where`` only where the target ignores ``other=``). Maths in fp32.

HEAD_TILE > 0 (the interpreter's plan, `HEAD_TILE` in its config): the
program covers every head, each tensor as one [tokens, HEAD_TILE, half]
tile. The interpreter pays per tile op, not per element, so one pass
replaces a loop of 12 head trips; compiled targets keep HEAD_TILE = 0 (the
branch is a constexpr: their code is unchanged).
"""

import triton
import triton.language as tl

from ..loads import masked_load


@triton.jit
def _rotate_heads(
    base_ptr,
    tokens,
    token_stride,
    head_stride,
    cos,
    sin,
    mask,
    half,
    first_head,
    end_head,
    ROT_HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
):
    """Rotate heads [first_head, end_head) of one tensor for a token tile."""
    if IS_NEOX:
        first, second = half, half + ROT_HALF
    else:
        first, second = 2 * half, 2 * half + 1
    for head in range(first_head, end_head):
        row_ptr = base_ptr + tokens * token_stride + head * head_stride
        x1 = masked_load(row_ptr + first, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
        x2 = masked_load(row_ptr + second, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
        y1 = x1 * cos - x2 * sin
        y2 = x2 * cos + x1 * sin
        tl.store(row_ptr + first, y1.to(base_ptr.dtype.element_ty), mask=mask)
        tl.store(row_ptr + second, y2.to(base_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotate_head_tile(base_ptr, tokens, token_stride, head_stride, cos, sin, token_mask, half, NUM_HEADS: tl.constexpr,
                      HEAD_TILE: tl.constexpr, ROT_HALF: tl.constexpr, IS_NEOX: tl.constexpr,
                      LOAD_IGNORES_OTHER: tl.constexpr):  # fmt: skip
    """Rotate all NUM_HEADS heads of one tensor for a token tile at once:
    tokens [T, 1], half [1, B] and cos / sin [T, B] widen to [T, HEAD_TILE, B]."""
    heads = tl.arange(0, HEAD_TILE)[None, :, None]
    half = half[:, None, :]
    if IS_NEOX:
        first, second = half, half + ROT_HALF
    else:
        first, second = 2 * half, 2 * half + 1
    mask = token_mask[:, :, None] & (heads < NUM_HEADS) & (half < ROT_HALF)
    row_ptr = base_ptr + tokens[:, :, None] * token_stride + heads * head_stride
    x1 = masked_load(row_ptr + first, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    x2 = masked_load(row_ptr + second, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    cos, sin = cos[:, None, :], sin[:, None, :]
    tl.store(row_ptr + first, (x1 * cos - x2 * sin).to(base_ptr.dtype.element_ty), mask=mask)
    tl.store(row_ptr + second, (x2 * cos + x1 * sin).to(base_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_tokens"])
def rotary_embedding_kernel(
    positions_ptr,
    query_ptr,
    key_ptr,
    cos_sin_ptr,
    n_tokens,
    query_token_stride,
    query_head_stride,
    key_token_stride,
    key_head_stride,
    cos_sin_row_stride,
    NUM_Q_HEADS: tl.constexpr,
    NUM_K_HEADS: tl.constexpr,
    ROT_HALF: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
    TOKENS_PER_PROGRAM: tl.constexpr,
    HEADS_PER_PROGRAM: tl.constexpr,
    LOAD_IGNORES_OTHER: tl.constexpr,
    HEAD_TILE: tl.constexpr,
):
    """Rotate a token tile's share of the NUM_Q_HEADS query heads followed by
    the NUM_K_HEADS key heads (0: no key)."""
    tokens = tl.program_id(0) * TOKENS_PER_PROGRAM + tl.arange(0, TOKENS_PER_PROGRAM)[:, None]
    half = tl.arange(0, BLOCK_HALF)[None, :]
    token_mask = tokens < n_tokens
    mask = token_mask & (half < ROT_HALF)
    positions = masked_load(positions_ptr + tokens, token_mask, 0, LOAD_IGNORES_OTHER).to(tl.int64)
    tokens = tokens.to(tl.int64)

    cos_ptrs = cos_sin_ptr + positions * cos_sin_row_stride + half
    cos = masked_load(cos_ptrs, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    sin = masked_load(cos_ptrs + ROT_HALF, mask, 0.0, LOAD_IGNORES_OTHER).to(tl.float32)
    if HEAD_TILE > 0:  # one program per token tile covers every head (the plan makes it so)
        _rotate_head_tile(query_ptr, tokens, query_token_stride, query_head_stride, cos, sin, token_mask, half,
                          NUM_Q_HEADS, HEAD_TILE, ROT_HALF, IS_NEOX, LOAD_IGNORES_OTHER)  # fmt: skip
        if NUM_K_HEADS > 0:
            _rotate_head_tile(key_ptr, tokens, key_token_stride, key_head_stride, cos, sin, token_mask, half,
                              NUM_K_HEADS, HEAD_TILE, ROT_HALF, IS_NEOX, LOAD_IGNORES_OTHER)  # fmt: skip
        return

    # This program's heads [start, start + HEADS_PER_PROGRAM) of the sequence
    # q_0 .. q_{NUM_Q_HEADS-1}, k_0 .. k_{NUM_K_HEADS-1}, split per tensor.
    start = tl.program_id(1) * HEADS_PER_PROGRAM
    end = start + HEADS_PER_PROGRAM
    q_first, q_end = tl.minimum(start, NUM_Q_HEADS), tl.minimum(end, NUM_Q_HEADS)
    k_first = tl.minimum(tl.maximum(start - NUM_Q_HEADS, 0), NUM_K_HEADS)
    k_end = tl.minimum(tl.maximum(end - NUM_Q_HEADS, 0), NUM_K_HEADS)
    _rotate_heads(query_ptr, tokens, query_token_stride, query_head_stride, cos, sin, mask, half,
                  q_first, q_end, ROT_HALF, IS_NEOX, LOAD_IGNORES_OTHER)  # fmt: skip
    _rotate_heads(key_ptr, tokens, key_token_stride, key_head_stride, cos, sin, mask, half,
                  k_first, k_end, ROT_HALF, IS_NEOX, LOAD_IGNORES_OTHER)  # fmt: skip
