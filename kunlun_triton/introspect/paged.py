"""Paged KV layouts for attention tests and benchmarks.

SGLang keeps one layer's KV cache in a pool of token slots, ``[slots,
kv_heads, head_dim]``, handed out in pages of ``page_size`` consecutive
slots; a request's tokens are the slots ``kv_indices[kv_indptr[b]:
kv_indptr[b+1]]``, in position order, wherever the allocator put them. Two
requests that share a prompt prefix (a radix-cache hit) list the same slots.

- `build_pool(...)`: a pool and its metadata for given request lengths, with
  pages scattered over the pool (permuted assignment) and optionally a
  prefix shared by every request; plain function, usable on any device.
- `decode_batch(...)` / `extend_batch(...)`: a full set of op arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class PagedPool:
    k_buffer: torch.Tensor  # [slots, kv_heads, head_dim]
    v_buffer: torch.Tensor  # [slots, kv_heads, v_head_dim]
    kv_indptr: torch.Tensor  # int32 [batch + 1]
    kv_indices: torch.Tensor  # int32 [kv_indptr[-1]]
    lens: list
    page_size: int
    shared_tokens: int = 0  # leading tokens whose slots every sharing request reuses

    def slots(self, b: int) -> torch.Tensor:
        return self.kv_indices[int(self.kv_indptr[b]) : int(self.kv_indptr[b + 1])]


def _indptr(lens, device) -> torch.Tensor:
    out = torch.zeros(len(lens) + 1, dtype=torch.int32, device=device)
    if lens:
        out[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int64, device=device), 0).to(torch.int32)
    return out


def build_pool(
    lens,
    *,
    kv_heads: int,
    head_dim: int,
    v_head_dim: int | None = None,
    page_size: int = 1,
    dtype=torch.float16,
    device="cpu",
    seed: int = 0,
    scramble: bool = True,
    shared_prefix_pages: int = 0,
    spare_pages: int = 1,
) -> PagedPool:
    """A pool holding requests of `lens` tokens. Each request owns whole pages
    (its last one partly filled); with `scramble` the pages are a random
    permutation of the pool's, so neighbouring tokens rarely sit in
    neighbouring slots across page boundaries. With `shared_prefix_pages`,
    every request longer than that prefix reuses request 0's first pages (a
    radix hit); their K/V values are then identical by construction."""
    lens = [int(n) for n in lens]
    gen = torch.Generator().manual_seed(seed)
    shared = shared_prefix_pages * page_size
    if not lens or lens[0] < shared:
        shared = 0
    own_pages = []
    for i, n in enumerate(lens):
        reused = shared if (i > 0 and shared and n > shared) else 0
        own_pages.append(math.ceil((n - reused) / page_size) if n > reused else 0)
    total_pages = sum(own_pages) + spare_pages
    order = torch.randperm(total_pages, generator=gen) if scramble else torch.arange(total_pages)
    offs = torch.arange(page_size)
    indices, next_page, shared_slots = [], 0, None
    for i, n in enumerate(lens):
        pages = order[next_page : next_page + own_pages[i]]
        next_page += own_pages[i]
        own = (pages[:, None] * page_size + offs[None, :]).reshape(-1)
        if i > 0 and shared and n > shared:
            slots = torch.cat([shared_slots, own])[:n]
        else:
            slots = own[:n]
        if i == 0 and shared:
            shared_slots = slots[:shared]
        indices.append(slots)
    kv_indices = torch.cat(indices) if indices else torch.zeros(0, dtype=torch.int64)
    num_slots = total_pages * page_size
    v_head_dim = head_dim if v_head_dim is None else v_head_dim
    values = torch.Generator(device=device).manual_seed(seed)  # drawn where they live: pools can be GBs
    make = lambda d: torch.randn(num_slots, kv_heads, d, generator=values, device=device, dtype=torch.float32 if torch.device(device).type == "cpu" else dtype).to(dtype)  # noqa: E731
    return PagedPool(
        k_buffer=make(head_dim),
        v_buffer=make(v_head_dim),
        kv_indptr=_indptr(lens, device),
        kv_indices=kv_indices.to(torch.int32).to(device),
        lens=lens,
        page_size=page_size,
        shared_tokens=shared,
    )


@dataclass
class DecodeBatch:
    q: torch.Tensor  # [batch, q_heads, head_dim]
    pool: PagedPool
    sm_scale: float
    logit_cap: float = 0.0
    sliding_window: int | None = None

    def args(self):
        """Positional arguments of decode_attention up to sm_scale, with a fresh o."""
        o = torch.empty(*self.q.shape[:2], self.pool.v_buffer.shape[2], dtype=self.q.dtype, device=self.q.device)
        p = self.pool
        return (self.q, p.k_buffer, p.v_buffer, o, p.kv_indptr, p.kv_indices, self.sm_scale)

    def kwargs(self):
        return {"logit_cap": self.logit_cap, "sliding_window": self.sliding_window}


@dataclass
class ExtendBatch:
    q_extend: torch.Tensor  # [tokens, q_heads, head_dim]
    k_extend: torch.Tensor  # [tokens, kv_heads, head_dim]
    v_extend: torch.Tensor  # [tokens, kv_heads, v_head_dim]
    qo_indptr: torch.Tensor
    pool: PagedPool  # the cached prefixes
    extend_lens: list
    sm_scale: float
    logit_cap: float = 0.0
    sliding_window: int | None = None
    extras: dict = field(default_factory=dict)

    @property
    def max_len_extend(self) -> int:
        return max(self.extend_lens, default=0)

    def args(self):
        """Positional arguments of extend_attention up to sm_scale, with a fresh o."""
        o = torch.empty(*self.q_extend.shape[:2], self.v_extend.shape[2], dtype=self.q_extend.dtype, device=self.q_extend.device)
        p = self.pool
        return (self.q_extend, self.k_extend, self.v_extend, o, p.k_buffer, p.v_buffer, self.qo_indptr,
                p.kv_indptr, p.kv_indices, self.max_len_extend, self.sm_scale)

    def kwargs(self):
        return {"logit_cap": self.logit_cap, "sliding_window": self.sliding_window}


def decode_batch(lens, *, q_heads, kv_heads, head_dim, v_head_dim=None, dtype=torch.float16, device="cpu",
                 seed=0, page_size=1, logit_cap=0.0, sliding_window=None, **pool_kw) -> DecodeBatch:
    pool = build_pool(lens, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim, page_size=page_size,
                      dtype=dtype, device=device, seed=seed, **pool_kw)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(len(lens), q_heads, head_dim, generator=gen).to(dtype).to(device)
    return DecodeBatch(q, pool, head_dim**-0.5, logit_cap, sliding_window)


def extend_batch(prefix_lens, extend_lens, *, q_heads, kv_heads, head_dim, v_head_dim=None, dtype=torch.float16,
                 device="cpu", seed=0, page_size=1, logit_cap=0.0, sliding_window=None, **pool_kw) -> ExtendBatch:
    pool = build_pool(prefix_lens, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim,
                      page_size=page_size, dtype=dtype, device=device, seed=seed, **pool_kw)
    tokens = sum(extend_lens)
    gen = torch.Generator().manual_seed(seed + 1)
    rand = lambda h, d: torch.randn(tokens, h, d, generator=gen).to(dtype).to(device)  # noqa: E731
    v_head_dim = head_dim if v_head_dim is None else v_head_dim
    return ExtendBatch(rand(q_heads, head_dim), rand(kv_heads, head_dim), rand(kv_heads, v_head_dim),
                       _indptr(list(extend_lens), device), pool, list(extend_lens), head_dim**-0.5,
                       logit_cap, sliding_window)
