"""SGLang 0.5.23's ``PagedTokenToKVPoolAllocator`` as a benchmark baseline.

Constructed with SGLang's own arguments (no KV buffers: the allocator only
hands out indices). On a device without SGLang Triton support (the CPU) it
runs SGLang's vectorised torch path (``alloc_extend_naive``); on GPUs its
Triton kernels. It has no reference counts, so the bench harness frees a
shared prefix once, when its last holder finishes.
"""

from __future__ import annotations

import torch
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator


def sglang_paged_allocator(size: int, page_size: int, device="cpu", need_sort: bool = False):
    return PagedTokenToKVPoolAllocator(
        size, page_size=page_size, dtype=torch.float16, device=device, kvcache=None, need_sort=need_sort
    )
