"""Pure-torch rotary embedding: the oracle for the kernel and the CPU fallback.

Follows SGLang's ``RotaryEmbedding.forward_native``: cos_sin_cache rows are
[cos | sin] (rotary_dim wide), gathered by position; NeoX style rotates the two
halves of the rotary part, GPT-J style its even/odd pairs; the rest of each
head passes through. Maths in fp32 (as sgl_kernel does), written back in place.
"""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """x: [tokens, heads, rotary_dim] fp32; cos, sin: [tokens, 1, rotary_dim // 2]."""
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin
    if is_neox:
        return torch.cat((y1, y2), dim=-1)
    return torch.stack((y1, y2), dim=-1).flatten(-2)


def _apply(x: torch.Tensor | None, head_size: int, cos, sin, is_neox: bool) -> None:
    if x is None or x.numel() == 0:  # 0 tokens: nothing to rotate (a view of 0 elements cannot infer heads)
        return
    heads = x.view(x.shape[0], -1, head_size)
    rotary_dim = 2 * cos.shape[-1]
    rotated = _rotate(heads[..., :rotary_dim].float(), cos, sin, is_neox)
    heads[..., :rotary_dim] = rotated.to(x.dtype)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
):
    """Rotate query and key ([tokens, heads * head_size] or [tokens, heads, head_size]) in place."""
    cos, sin = cos_sin_cache[positions.long()].float().chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    _apply(query, head_size, cos, sin, is_neox)
    _apply(key, head_size, cos, sin, is_neox)
    return query, key
