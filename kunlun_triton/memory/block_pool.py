"""A pool of KV-cache pages with reference counts.

Slot ``s`` (one token's K/V row in every layer's buffer) lives in page
``s // page_size``. Page 0 is padding (SGLang writes dummy tokens there) and
is never handed out, so a pool of ``num_pages`` pages owns page ids
``1 .. num_pages`` and the KV buffers need ``(num_pages + 1) * page_size``
rows.

Metadata is O(pages), never O(tokens):

- ``_free``: an int64 stack of free page ids. The free pages are
  ``_free[_base:]``; taking ``n`` pages reads ``_free[_base:_base + n]`` and
  moves ``_base`` up, releasing ``k`` pages writes them just below ``_base``.
  Both are one slice and one copy: no ``torch.cat`` of the whole free list
  per call (SGLang's allocator concatenates, which costs O(free pages)).
- ``_refcount``: int32 per page. 0 free, 1 held by one user, > 1 shared
  (radix-cache prefixes). A page returns to the stack when its count hits 0.
- ``_stamp``: int64 scratch per page for de-duplicating page ids in O(n)
  without a sort (see ``unique_pages``).

Every hot-path method is a handful of tensor ops on the pool's device, no
Python loop per page or token. The only host syncs are the data-dependent
sizes (how many pages a release frees), whether a release named a page
twice, and, in checked mode, the error checks (one reduction each).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from ..runtime.env import env_flag


def count_arg(where: str, name: str, value) -> int:
    """`value` as a Python int (ints, numpy integers, integer 0-d tensors),
    else TypeError naming the argument; bools and floats are refused, even
    whole ones (a float size is a caller's arithmetic gone wrong)."""
    if isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{where}: {name} must be an integer, got {type(value).__name__} {value!r}") from None


_INTEGER_IDS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class PoolError(ValueError):
    """A free or share that would corrupt the pool (double free, never
    allocated, reference count below zero). The pool is unchanged when it is
    raised (a release that went wrong is rolled back first)."""


def checked_default() -> bool:
    """Checked mode is on unless ``KUNLUN_TRITON_POOL_CHECKED=0``.

    What checked mode catches: a release of a page that is not held (double
    free, never allocated, more releases than holders) and a share of a free
    page, each refused with ``PoolError`` before anything moves. It costs
    one reduction (a host sync) per share and nothing on a release's
    normal path (the check rides on a reduction every release makes).

    Unchecked, those go through: a double free takes the page's count below
    zero (it is not stacked twice; the count is wrong until the page is next
    taken), and a share of a free page marks it held while it stays on the
    free stack, so it is later handed to a second request and two requests
    write the same KV slots: wrong outputs, no error. Ids outside the pool
    are refused in both modes on the CPU (``PoolError``); on a GPU the bounds
    check is the device's own, and an id far outside the pool is a
    device-side assert that ends the process. Neither mode can tell a
    release of a page someone else holds from a legitimate one.

    Why the SGLang plugin may run unchecked: SGLang's scheduler frees only
    slots the allocator handed out (its ``req_to_token`` rows), each
    request's once, and its radix cache frees a cached prefix once, when
    eviction finds the node unlocked; our ``share`` is never called by
    SGLang. Under those invariants no check ever fires; it is on by default
    because a bug that breaks them would otherwise corrupt other requests'
    KV silently."""
    return env_flag("KUNLUN_TRITON_POOL_CHECKED", True)


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of the pool, counted in pages (``page_size`` tokens each).

    ``fragmentation`` is the share of free pages outside the longest run of
    consecutive free page ids: 0.0 when the free pages form one block, near
    1.0 when they are scattered one by one. Paged attention does not need
    contiguous pages, but contiguity helps block DMA and cache locality."""

    page_size: int
    total_pages: int
    free_pages: int
    used_pages: int
    shared_pages: int  # used pages with more than one holder
    pending_free_pages: int  # deferred inside a free group, not yet released
    fragmentation: float

    @property
    def free_tokens(self) -> int:
        return self.free_pages * self.page_size

    def __str__(self) -> str:
        return (
            f"{self.used_pages}/{self.total_pages} pages used ({self.shared_pages} shared), "
            f"{self.free_pages} free, {self.pending_free_pages} pending, "
            f"page_size {self.page_size}, fragmentation {self.fragmentation:.2f}"
        )


class BlockPool:
    """Pages ``1..num_pages`` of ``page_size`` slots, with reference counts."""

    def __init__(self, num_pages: int, page_size: int, device="cpu", checked: bool | None = None):
        num_pages = count_arg("BlockPool", "num_pages", num_pages)
        page_size = count_arg("BlockPool", "page_size", page_size)
        if page_size < 1:
            raise ValueError(f"BlockPool: page_size must be >= 1, got {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.device = torch.device(device)
        self.checked = checked_default() if checked is None else bool(checked)
        # On a device, twice the pages plus a zero half: an id just past the
        # end lands there (count 0 = not allocated, caught by the checked
        # count test) instead of a device-side assert that ends the process.
        # On the CPU index_select raises for every id outside the table, so
        # the table is exactly pages 0..num_pages: ids outside the pool are
        # refused in both modes (with the zero half, an unchecked share/free
        # of page 12 in an 8-page pool went through and later handed page 12
        # out; issue 25).
        table = self.num_pages + 1 if self.device.type == "cpu" else 2 * (self.num_pages + 1)
        self._refcount = torch.zeros(table, dtype=torch.int32, device=self.device)
        self._stamp = torch.zeros(table, dtype=torch.int64, device=self.device)
        self._free = torch.empty(self.num_pages, dtype=torch.int64, device=self.device)
        self._arange = torch.arange(max(self.num_pages, 1) + 1, dtype=torch.int64, device=self.device)
        self._page_offsets = torch.arange(self.page_size, dtype=torch.int64, device=self.device)
        self._plus_one = torch.ones(1, dtype=torch.int32, device=self.device)  # .expand(n): a +-1 per id, no copy
        self._minus_one = -self._plus_one
        self.reset()

    # ------------------------------------------------------------ state

    def reset(self) -> None:
        """Every page free, in ascending order (the first take gets page 1)."""
        self._refcount.zero_()
        self._free.copy_(self._arange[1 : self.num_pages + 1])
        self._base = 0

    @property
    def free_page_count(self) -> int:
        return self.num_pages - self._base

    def free_page_ids(self) -> torch.Tensor:
        """The free pages in the order they will be taken (a view)."""
        return self._free[self._base :]

    def refcounts(self, pages: torch.Tensor) -> torch.Tensor:
        return self._refcount[pages]

    def refcount_table(self) -> torch.Tensor:
        """Counts of pages 0..num_pages (a view; page 0 is always 0)."""
        return self._refcount[: self.num_pages + 1]

    # ------------------------------------------------------------ take / share / release

    # Op choices below were timed on this 2-core host, 1 torch thread, ~150
    # page ids: ``index_select`` 1.7 us vs ``t[idx]`` 7 us (Python-side index
    # parsing); ``index_add_`` of an expanded +-1 2.7 us vs ``index_put_(...,
    # accumulate=True)`` 4.8 us.

    def take(self, n: int) -> torch.Tensor | None:
        """``n`` free pages with reference count 1, or None (and no change)
        when fewer than ``n`` are free. The result is a view of the free
        stack: use it before the next release overwrites it. ``n`` must be
        an integer >= 0 (ValueError/TypeError otherwise, and no change: a
        negative ``n`` would move the stack's base backwards)."""
        if type(n) is not int:
            n = count_arg("take", "n", n)
        if n > self.num_pages - self._base:
            return None
        if n < 0:
            raise ValueError(f"take: n must be >= 0, got {n}")
        pages = self._free[self._base : self._base + n]
        self._base += n
        self._refcount.index_fill_(0, pages, 1)
        return pages

    def share(self, pages: torch.Tensor, counted: bool = False) -> None:
        """One more holder for each distinct page in ``pages`` (a radix-cache
        prefix reused by another request); with ``counted``, one more per
        occurrence instead (no de-duplication pass). In checked mode every
        page must already be allocated."""
        if pages.dim() != 1:
            pages = pages.reshape(-1)
        n = pages.numel()
        if n == 0:
            return
        try:
            if not counted:
                pages = self.unique_pages(pages)
                n = pages.numel()
            old = self._refcount.index_select(0, pages)  # the bounds check, before any write
        except (IndexError, RuntimeError) as exc:
            raise self.bad_ids("share", pages, exc) from None
        # One reduction and one sync: min(old) <= 0 names a page that is free.
        if self.checked and int(torch.min(old)) <= 0:
            raise PoolError(f"share of pages that are not allocated: {self._describe(pages[old <= 0])}")
        self._refcount.index_add_(0, pages, self._plus_one.expand(n))

    def release(self, pages: torch.Tensor, counted: bool = False, distinct: bool = False) -> int:
        """One holder fewer for each distinct page in ``pages`` (with
        ``counted``: one fewer per occurrence, so two holders of a page may
        release it in one call; ``distinct`` promises no id repeats, e.g. the
        output of ``unique_pages``). Pages whose count reaches 0 go back on
        the free stack, each once; returns how many did.

        In checked mode a page that is free (double free, never allocated),
        outside the pool, or whose count would go below zero raises
        ``PoolError`` naming its slots, and the pool is left as it was."""
        if pages.dim() != 1:
            pages = pages.reshape(-1)
        n = pages.numel()
        if n == 0:
            return 0
        rc = self._refcount
        try:
            if not (counted or distinct):
                pages = self.unique_pages(pages)
                n, distinct = pages.numel(), True
            # The bounds check before any write (index_add_ is not atomic when
            # an index is out of range), and each occurrence's old count.
            old = rc.index_select(0, pages)
        except (IndexError, RuntimeError) as exc:
            raise self.bad_ids("free", pages, exc) from None
        # Decrement, then read the new counts: a page named m times moves by
        # m and every occurrence sees the final count (new = old - m).
        rc.index_add_(0, pages, self._minus_one.expand(n))
        new = rc.index_select(0, pages)
        # One elementwise op and one reduction flag both rare cases:
        # z = old - 2 * new = m - new >= 2 where a count went below zero
        # (double free, never allocated, more frees than holders) or a page
        # named m >= 2 times hit 0 (it would be selected m times); a page
        # named once that hits 0 gives 1, one that stays held <= 0. (It can
        # also flag a repeat that stays held; the slow path then finds
        # nothing to do.) The first version spent ~11 ops and 3 syncs here
        # (a de-duplication pass, separate "count <= 0" and "repeats"
        # reductions, getitem/index_put_ forms): free_group_end 130 -> 78 us
        # a call (page 16, 1 thread, serving trace; SGLang's, no counts: 28).
        suspicious = int(torch.max(torch.sub(old, new, alpha=2))) >= 2
        if suspicious and self.checked and int(torch.min(new)) < 0:
            rc.index_add_(0, pages, self._plus_one.expand(n))  # roll back, then raise
            self._raise_released(pages[new < 0])
        freed = torch.masked_select(pages, new == 0)
        k = freed.numel()
        if k == 0:
            return 0
        if suspicious and not distinct:
            freed = self.unique_pages(freed)  # each page once on the stack
            k = freed.numel()
        self._free[self._base - k : self._base] = freed
        self._base -= k
        return k

    def release_batches(self, batches: list) -> int:
        """`release` (counted) of several callers' page tensors, in order, as
        one (one pass on the normal path). When that is refused (checked
        mode: a page not held; any mode: an id outside the pool) each batch
        is released on its own, in order, so every valid one still happens
        and only the bad ones are dropped; then ``PoolError`` names those.
        Either way, afterwards the free pages plus the pages held are the
        capacity. Returns how many pages went back on the free stack."""
        if not batches:
            return 0
        # torch.cat would promote bool ids to page numbers: any batch that is
        # not integer ids goes the slow way (a dtype read per batch).
        try:
            if len(batches) == 1 or all(b.dtype in _INTEGER_IDS for b in batches):
                return self.release(batches[0] if len(batches) == 1 else torch.cat(batches), counted=True)
        except Exception:  # a refused release changed nothing (see `release`)
            if len(batches) == 1:
                raise
        freed, refused = 0, []
        for i, pages in enumerate(batches):
            try:
                freed += self.release(pages, counted=True)
            except Exception as exc:  # PoolError; TypeError for ids that are not integers
                refused.append(f"free #{i + 1}: {exc}")
        raise PoolError(
            f"{len(refused)} of the {len(batches)} frees of the group were refused (the other "
            f"{len(batches) - len(refused)} went through, {freed} pages back in the pool): " + "; ".join(refused)
        )

    def unique_pages(self, pages: torch.Tensor) -> torch.Tensor:
        """The distinct ids in ``pages`` (which must lie in 0..num_pages), in
        O(n) without a sort: scatter each position into its page's stamp;
        among repeated ids one write wins, so exactly one position per id
        reads its own index back. Order of first appearance is kept for ids
        whose occurrences are adjacent (a kv row's pages)."""
        pages = pages.reshape(-1)
        n = pages.numel()
        if n <= 1:
            return pages
        order = self._arange[:n] if n <= self._arange.numel() else torch.arange(n, device=self.device)
        self._stamp.index_put_((pages,), order)
        return torch.masked_select(pages, self._stamp.index_select(0, pages) == order)

    # ------------------------------------------------------------ observability

    def stats(self, pending_pages: int = 0) -> PoolStats:
        counts = self._refcount[1 : self.num_pages + 1]
        used = counts > 0
        used_pages = int(used.sum())
        shared = int((counts > 1).sum())
        free = self.num_pages - used_pages
        return PoolStats(
            page_size=self.page_size,
            total_pages=self.num_pages,
            free_pages=free,
            used_pages=used_pages,
            shared_pages=shared,
            pending_free_pages=pending_pages,
            fragmentation=_fragmentation(~used, free),
        )

    def check_consistency(self) -> None:
        """Expensive (O(pages)) invariants, for tests and debugging: the free
        stack holds each free page once, exactly the pages with count 0."""
        free = self.free_page_ids()
        if free.numel() and (free.min() < 1 or free.max() > self.num_pages):
            raise AssertionError("free stack holds an id outside 1..num_pages")
        on_stack = torch.zeros(self.num_pages + 1, dtype=torch.int64, device=self.device)
        on_stack.index_add_(0, free, torch.ones_like(free))
        if int(on_stack.max()) > 1:
            raise AssertionError(f"pages on the free stack twice: {torch.nonzero(on_stack > 1).flatten().tolist()}")
        if bool(self._refcount[self.num_pages + 1 :].any()) or int(self._refcount[0]) != 0:
            raise AssertionError("the padding page or the sentinel half has a count")
        count_zero = self._refcount[: self.num_pages + 1] == 0
        count_zero[0] = False
        if not torch.equal(on_stack.bool(), count_zero):
            raise AssertionError("free stack and reference counts disagree")
        if bool((self._refcount < 0).any()):  # noqa: SIM102
            raise AssertionError("negative reference count")

    # ------------------------------------------------------------ errors

    def _outside(self, what: str) -> str:
        return f"{what} of slots outside the pool (pages 1..{self.num_pages})"

    def bad_ids(self, what: str, pages: torch.Tensor, exc: Exception) -> Exception:
        """The error for ids an index op refused (raised before any write):
        TypeError for ids that are not integers, PoolError for ids outside
        the pool, else `exc` itself. Ids are not type-checked up front: on
        the serving trace's replay such a check cost ~1% (CPU time, paired
        A/B), for an error torch raises anyway."""
        if pages.dtype not in _INTEGER_IDS:
            return TypeError(f"{what}: slot and page ids must be an integer tensor, got dtype {pages.dtype}")
        if isinstance(exc, IndexError):
            return PoolError(self._outside(what))
        return exc

    def _raise_released(self, bad: torch.Tensor) -> None:
        """``bad``: pages a release would have taken below zero (already
        rolled back). Free ones were never allocated or freed twice."""
        never = bad[self._refcount[bad] == 0]
        if never.numel():
            raise PoolError(f"free of slots that are not allocated (double free?): {self._describe(never.unique())}")
        raise PoolError(
            f"reference count below zero (freed more times than held): {self._describe(bad.unique())}"
        )

    def _describe(self, pages: torch.Tensor, limit: int = 8) -> str:
        ids = pages.reshape(-1)[:limit].tolist()
        ps = self.page_size
        parts = [f"page {p} (slots {p * ps}..{p * ps + ps - 1})" for p in ids]
        more = pages.numel() - len(ids)
        return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def _fragmentation(free_mask: torch.Tensor, free_pages: int) -> float:
    """1 - longest run of consecutive free pages / free pages (0 when none free)."""
    if free_pages == 0:
        return 0.0
    flags = free_mask.to(torch.int8)
    edges = torch.diff(flags, prepend=flags.new_zeros(1), append=flags.new_zeros(1))
    starts = torch.nonzero(edges == 1).flatten()
    ends = torch.nonzero(edges == -1).flatten()
    longest = int((ends - starts).max())
    return 1.0 - longest / free_pages
