"""KV-cache memory: a page pool with reference counts and an allocator with
SGLang's interface on top of it (no SGLang import here).

- ``BlockPool``: pages ``1..num_pages``, reference counts, O(pages) metadata;
- ``PagedKVAllocator``: SGLang's ``PagedTokenToKVPoolAllocator`` interface
  (alloc, alloc_extend, alloc_decode, free, free_segment(s), free groups,
  available_size, clear, merge_and_sort_free) plus ``share`` and ``stats``;
- ``plan_kv_pool`` / ``PagedKVAllocator.from_memory_fraction``: sizing from
  a memory fraction the way ``--mem-fraction-static`` does.
"""

from .block_pool import BlockPool, PoolError, PoolStats
from .paged_allocator import PagedKVAllocator
from .sizing import PoolSizing, kv_bytes_per_token, plan_kv_pool

__all__ = [
    "BlockPool",
    "PagedKVAllocator",
    "PoolError",
    "PoolSizing",
    "PoolStats",
    "kv_bytes_per_token",
    "plan_kv_pool",
]
