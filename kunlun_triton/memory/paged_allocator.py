"""A paged token-to-KV-slot allocator with SGLang's interface, on ``BlockPool``.

``PagedKVAllocator`` has the method names, arguments, return values and
invariants of SGLang 0.5.23's ``PagedTokenToKVPoolAllocator``
(``sglang/srt/mem_cache/allocator/paged.py``) without importing SGLang, so
the plugin can hand it to SGLang from ``get_paged_allocator_cls()``:

    class KunlunPagedAllocator(PagedKVAllocator, BaseTokenToKVPoolAllocator):
        pass    # PagedKVAllocator first in the MRO: its methods win

What the plugin must pass (SGLang's own constructor call does this): ``size``
(tokens, a multiple of ``page_size``), ``page_size``, ``dtype`` (the KV
dtype; unused here), ``device``, ``kvcache`` (the KV pool, returned by
``get_kvcache()``; its buffers need ``size + page_size`` rows, slot 0 is
padding) and ``need_sort``. ``checked`` is ours: keyword-only, default from
``KUNLUN_TRITON_POOL_CHECKED`` (on).

Semantics shared with SGLang:
- slot 0 (all of page 0) is never handed out;
- ``alloc(n)`` takes ``n / page_size`` whole pages; every allocation returns
  None when the pool is short, and then nothing changed;
- ``alloc_extend`` continues each request's partial last page at
  ``last_loc + 1`` before taking new pages; ``alloc_decode`` likewise;
- ``free`` releases every page any given slot lies in (whole pages);
- inside ``free_group_begin()/free_group_end()`` freed pages return to the
  pool at the end (each call de-duplicated on its own: two holders of a
  shared page may both free it in one group);
- ``free_segment(idx, start_pos=)`` releases ``idx[::page_size]``'s pages,
  ``free_page_ids(pages)`` exactly the pages given (each once).

Beyond SGLang: pages carry reference counts (``share``), so a prefix held by
several requests returns to the pool when its last holder frees it; a double
free raises ``PoolError`` with slot ids in checked mode; ``stats()``.

Bad arguments raise and change nothing (checked on the host, from values the
call already has: a few us, no device sync): every size is an integer
(``alloc``: a multiple of ``page_size`` in ``0..size``, where SGLang only
asserts in its debug mode and otherwise corrupts its free list on a negative
size), per-request lengths are CPU integer tensors of one length each with
``0 <= prefix <= seq`` and ``extend_num_tokens``/``num_new_pages`` agreeing
with them, and ids that are not integers are refused (``TypeError``, from
the index op that reads them, before any write). A bad free inside a free group is
dropped at ``free_group_end``, which raises ``PoolError`` naming it after
making every other free of the group (one pass while all are good; call by
call only once one is refused), so after any error ``available_size()``
plus the pages callers hold is the capacity. In checked mode
(``KUNLUN_TRITON_POOL_CHECKED``, on by default) a free of a page that is
not held raises ``PoolError``; unchecked, it is not detected: see
``block_pool.checked_default`` for what that lets through.

Differences, on purpose: ``alloc(n)`` with ``n`` beyond the capacity raises
(SGLang returns None: short; such a request can never be served).
Freed pages are reusable at once (SGLang with
``need_sort`` stages them until an allocation runs short, then sorts); here
``merge_and_sort_free()`` sorts the free pages so the next allocations take
ascending ids, and ``available_size()`` is the same either way.
"""

from __future__ import annotations

import numpy as np
import torch

from ..runtime.log import logger
from .block_pool import BlockPool, PoolStats, count_arg
from .paged_slots import count_mismatch, extend_slots, host_lengths, token_count_mismatch


class PagedKVAllocator:
    """Token slots handed out page by page; see the module docstring."""

    def __init__(self, size, page_size, dtype=None, device="cpu", kvcache=None, need_sort=False, *, checked=None):
        size = count_arg("PagedKVAllocator", "size", size)
        page_size = count_arg("PagedKVAllocator", "page_size", page_size)
        if size < 0 or page_size < 1:
            raise ValueError(f"PagedKVAllocator: need size >= 0 and page_size >= 1, got {size} and {page_size}")
        if size % page_size:
            logger.debug("allocator size %d is not a multiple of page_size %d; rounding down", size, page_size)
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.device = device
        self._kvcache = kvcache
        self.need_sort = need_sort
        self.num_pages = self.size // self.page_size
        self.pool = BlockPool(self.num_pages, self.page_size, device=device, checked=checked)
        self._on_cpu = self.pool.device.type == "cpu"  # host index arrays need no copy
        self.sizing = None  # set by from_memory_fraction
        self.clear()

    @classmethod
    def from_memory_fraction(cls, **kwargs) -> PagedKVAllocator:
        """Size the pool like SGLang's ``--mem-fraction-static``; see
        ``kunlun_triton.memory.sizing.plan_kv_pool`` for the arguments. The
        plan is logged and kept as ``allocator.sizing``."""
        from .sizing import allocator_from_memory_fraction

        return allocator_from_memory_fraction(cls, **kwargs)

    # ------------------------------------------------------------ SGLang: bookkeeping

    @property
    def size_full(self) -> int:
        return self.size

    @property
    def checked(self) -> bool:
        return self.pool.checked

    @property
    def free_pages(self) -> torch.Tensor:
        return self.pool.free_page_ids()

    def get_kvcache(self):
        return self._kvcache

    def available_size(self) -> int:
        return self.pool.free_page_count * self.page_size

    def get_all_free_pages(self) -> torch.Tensor:
        return self.pool.free_page_ids()

    def clear(self) -> None:
        self.pool.reset()
        self.free_group = None  # inside a group: the page tensors its frees named, released at its end

    def merge_and_sort_free(self) -> None:
        free = self.pool.free_page_ids()
        if free.numel() > 1:
            free.copy_(torch.sort(free).values)

    def debug_print(self) -> str:
        return str(self.stats())

    def verify_byte_accounting(self) -> list:
        return []

    def translate_kv_indices_for_transfer(self, kv_indices: torch.Tensor) -> torch.Tensor:
        return kv_indices

    def resize(self, config) -> None:
        """SGLang's resize: a new token budget, everything freed."""
        self.__init__(
            config.max_total_num_tokens, self.page_size, self.dtype, self.device, self._kvcache,
            self.need_sort, checked=self.pool.checked,
        )

    def get_cpu_copy(self, indices, mamba_indices=None, req_pool_index=None):
        return self._kvcache.get_cpu_copy(indices, mamba_indices=mamba_indices, req_pool_index=req_pool_index)

    def load_cpu_copy(self, kv_cache_cpu, indices, mamba_indices=None, req_pool_index=None):
        return self._kvcache.load_cpu_copy(
            kv_cache_cpu, indices, mamba_indices=mamba_indices, req_pool_index=req_pool_index
        )

    # ------------------------------------------------------------ SGLang: allocation

    def alloc(self, need_size: int):
        """``need_size`` slots as whole pages (page-major), or None when the
        pool is short. ``need_size`` must be an integer multiple of
        ``page_size`` (SGLang's debug mode asserts it) in ``0..size``:
        anything else raises and changes nothing."""
        if type(need_size) is not int:
            need_size = count_arg("alloc", "need_size", need_size)
        if need_size % self.page_size or need_size < 0 or need_size > self.size:
            raise ValueError(
                f"alloc: need_size must be a multiple of page_size {self.page_size} in 0..{self.size} "
                f"(the pool's capacity), got {need_size}"
            )
        pages = self.pool.take(need_size // self.page_size)
        if pages is None:
            return None
        return (pages[:, None] * self.page_size + self.pool._page_offsets).reshape(-1)

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor,
        prefix_lens_cpu: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        last_loc: torch.Tensor,
        extend_num_tokens: int,
        num_new_pages: int | None = None,
    ):
        """Slots for tokens ``prefix_lens[i] .. seq_lens[i]-1`` of each request,
        concatenated request by request. A request whose prefix ends mid-page
        continues that page (``last_loc[i] + 1, ...``), then takes new pages.

        For the token at position ``pos`` of request ``i``:
            pos <  ceil(prefix/ps)*ps:  slot = last_loc + 1 + (pos - prefix)
            otherwise:                  slot = new_page[i, pos//ps - ceil(prefix/ps)] * ps + pos % ps

        Per-request numbers come from the ``_cpu`` copies (numpy: no device
        launch, no sync); the device work is a take and one or two tensor ops.

        Validated on those host copies (~2 us; nothing changes when a check
        fails): CPU integer lengths, one per request in them and in
        ``last_loc`` (the device ``prefix_lens``/``seq_lens`` are not read),
        ``0 <= prefix <= seq``, ``num_new_pages`` (when given)
        equal to the pages the lengths need, and ``extend_num_tokens ==
        sum(seq - prefix)``, the last where the slots are laid out, from a
        sum that is computed there anyway (a separate reduction cost 1.4 us;
        the pages taken go back when it fails). ``last_loc`` lives on the
        device and is trusted (SGLang reads it from its ``req_to_token``
        table): a wrong one hands out slots of pages the request does not
        hold.
        """
        ps = self.page_size
        # numpy ufuncs and methods, not np.cumsum/np.repeat/np.array_equal:
        # those wrappers cost 4 us each here vs 0.6 us for np.add.accumulate.
        prefix = host_lengths("alloc_extend", "prefix_lens_cpu", prefix_lens_cpu).astype(np.int64, copy=False)
        seq = host_lengths("alloc_extend", "seq_lens_cpu", seq_lens_cpu).astype(np.int64, copy=False)
        bs = prefix.size
        if seq.size != bs or last_loc.numel() != bs:  # the device prefix_lens/seq_lens are not read
            raise count_mismatch("alloc_extend", bs, seq_lens_cpu=seq_lens_cpu, last_loc=last_loc)
        extend = seq - prefix
        # 0 <= prefix <= seq: a lone request (most prefill batches) by two
        # scalar reads; more by one reduction over both (measured on the
        # serving trace, a reduction costs ~5 us a call in context).
        if (prefix[0] < 0 or extend[0] < 0) if bs == 1 else (bs and np.minimum(prefix, extend).min() < 0):
            raise ValueError(
                f"alloc_extend: need 0 <= prefix_lens <= seq_lens per request, got prefix_lens {prefix.tolist()} "
                f"and seq_lens {seq.tolist()}"
            )
        if type(extend_num_tokens) is not int:
            extend_num_tokens = count_arg("alloc_extend", "extend_num_tokens", extend_num_tokens)
        prefix_pages = (prefix + (ps - 1)) // ps  # pages the prefix touches
        new_per_req = (seq + (ps - 1)) // ps - prefix_pages
        needed = int(np.add.reduce(new_per_req))
        if num_new_pages is not None and num_new_pages != needed:
            raise ValueError(f"alloc_extend: num_new_pages {num_new_pages!r} but the lengths need {needed} new pages")
        pages = self.pool.take(needed)
        if pages is None:
            return None
        if ps == 1:  # every token is a new page
            if needed != extend_num_tokens:
                self.pool.release(pages.clone(), counted=True, distinct=True)
                raise token_count_mismatch(extend_num_tokens, needed)
            return pages.clone()  # the view would be overwritten
        try:
            return extend_slots(pages, self.pool._page_offsets, self.page_size, prefix, extend, prefix_pages, new_per_req,
                                last_loc, extend_num_tokens, self._to_device)  # fmt: skip
        except Exception:
            self.pool.release(pages.clone(), counted=True, distinct=True)  # a bad argument must not leak pages
            raise

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(array)
        return t if self._on_cpu else t.to(self.pool.device, non_blocking=True)

    def alloc_decode(self, seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor, last_loc: torch.Tensor):
        """One slot per request for the token at position ``seq_lens[i] - 1``:
        ``last_loc[i] + 1`` unless that position starts a new page.

        Steps where no request crosses a page boundary take no page and cost
        one tensor op; the others five (slice, refcount fill, ``* ps``,
        index_copy_), where SGLang's torch path spends ~14. Measured (1
        thread, page 16, serving trace, median per call): 46 us, first
        version 74 us, SGLang 136 us."""
        ps = self.page_size
        seq = host_lengths("alloc_decode", "seq_lens_cpu", seq_lens_cpu)
        bs = seq.size
        if last_loc.numel() != bs:  # the device seq_lens is not read
            raise count_mismatch("alloc_decode", bs, last_loc=last_loc)
        # seq_lens' values are not range-checked: a reduction costs ~5 us a
        # call in context (serving trace), and no value can unbalance the
        # pool (the pages taken are the requests at a page boundary, at most
        # one each, every one handed out). SGLang's seq_lens are >= 1.
        needs_page = (seq % ps == 1 % ps).nonzero()[0]
        if ps == 1:
            pages = self.pool.take(needs_page.size)
            return None if pages is None else pages.clone()
        if last_loc.dtype != torch.int64:
            last_loc = last_loc.to(torch.int64)
        if needs_page.size == 0:
            return last_loc + 1
        pages = self.pool.take(needs_page.size)
        if pages is None:
            return None
        out = last_loc + 1
        return out.index_copy_(0, self._to_device(needs_page), pages * ps)

    # ------------------------------------------------------------ SGLang: freeing

    def free(self, free_index: torch.Tensor) -> None:
        """Release every page a slot in ``free_index`` lies in (each page
        once per call; reference counts decide when it is really free).

        Inside a free group the release waits for ``free_group_end``, each
        call de-duplicated now: across calls of a group each call is one
        holder letting go (SGLang, without counts, de-duplicates the whole
        group; the two agree whenever no page is held twice)."""
        if free_index.numel() == 0:
            return
        pages = torch.div(free_index.reshape(-1), self.page_size, rounding_mode="floor")
        if self.free_group is not None:
            try:
                self.free_group.append(self.pool.unique_pages(pages))  # a fresh tensor: no clone
            except (IndexError, RuntimeError) as exc:
                raise self.pool.bad_ids("free", pages, exc) from None
            return
        self.pool.release(pages)

    def free_full(self, free_index: torch.Tensor) -> None:
        self.free(free_index)

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """Free ``kv_row[start_pos : start_pos + n]`` of one request:
        ``start_pos`` is page-aligned, so ``free_index[::page_size]`` holds one
        slot of each page exactly once (a trailing partial page included)."""
        if free_index.numel() == 0:
            return
        if start_pos % self.page_size:
            raise ValueError(f"free_segment start_pos {start_pos} is not a multiple of page_size {self.page_size}")
        reps = (free_index if free_index.dim() == 1 else free_index.reshape(-1))[:: self.page_size]
        self._release_pages(torch.div(reps, self.page_size, rounding_mode="floor"))

    def free_page_ids(self, page_ids: torch.Tensor) -> None:
        """Release exactly these pages, each at most once (a repeat counts as
        one more holder letting go; checked mode raises if that takes a
        count below zero); deferred inside a free group."""
        if page_ids.numel() == 0:
            return
        self._release_pages(page_ids.reshape(-1).clone() if self.free_group is not None else page_ids.reshape(-1))

    def _release_pages(self, pages: torch.Tensor) -> None:
        """``pages``: a tensor the caller no longer touches."""
        if self.free_group is not None:
            self.free_group.append(pages)
            return
        self.pool.release(pages, counted=True)

    def free_segments(self, segments) -> None:
        """Ascending ``(free_index, start_pos)`` segments of one request's row,
        no two touching the same page."""
        for free_index, start_pos in segments:
            self.free_segment(free_index, start_pos=start_pos)

    def free_full_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        self.free_segment(free_index, start_pos=start_pos)

    def free_full_segments(self, segments) -> None:
        self.free_segments(segments)

    def free_group_begin(self) -> None:
        """Frees until ``free_group_end`` are collected and released there,
        in one pass."""
        if self.free_group is not None:
            raise RuntimeError("free groups cannot be nested")
        self.free_group = []

    def free_group_end(self) -> None:
        """Release the group's frees. A bad one (double free, never
        allocated, outside the pool: ``PoolError``) is dropped and named,
        and every other free of the group still happens, so the pool never
        loses the pages of the good ones (`BlockPool.release_batches`)."""
        pending, self.free_group = self.free_group, None
        self.pool.release_batches(pending)

    # ------------------------------------------------------------ beyond SGLang

    def share(self, indices: torch.Tensor, *, start_pos: int | None = None) -> None:
        """Another holder for every page a slot in ``indices`` lies in (a
        prefix reused through the radix cache): each holder frees it once.
        With ``start_pos`` (page-aligned, like ``free_segment``) the pages are
        read from ``indices[::page_size]`` without de-duplication."""
        if indices.numel() == 0:
            return
        if indices.dim() != 1:
            indices = indices.reshape(-1)
        if start_pos is None:
            self.pool.share(torch.div(indices, self.page_size, rounding_mode="floor"))
            return
        if start_pos % self.page_size:
            raise ValueError(f"share start_pos {start_pos} is not a multiple of page_size {self.page_size}")
        reps = indices[:: self.page_size]
        self.pool.share(torch.div(reps, self.page_size, rounding_mode="floor"), counted=True)

    def stats(self) -> PoolStats:
        pending = sum(pages.numel() for pages in self.free_group or ())
        return self.pool.stats(pending_pages=pending)


# The argument checks on the hot paths are what the serving trace's replay
# could afford (paired A/B against the unchecked code, CPU time, 200-300
# alternating replays; a loop's microbenchmark understates in-context cost
# ~5-10x): metadata and array flags the call reads anyway, scalar reads,
# no numpy reduction (~5 us a call in context) where one can be avoided.
