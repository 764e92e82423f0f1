"""The allocator against a plain Python model, driven by hypothesis.

The model keeps, per live request, its list of slots, and per page a holder
count. Rules: prefill a batch (some requests continuing a shared,
page-aligned prefix), extend a request (continues its partial last page),
decode every live request, share a prefix, release requests (sometimes in a
free group), clear. After every step: no slot is handed to two requests
unless its page is shared, every slot lies in pages 1..num_pages, counts and
available_size match the model exactly, and the pool's own free stack agrees.
A refused allocation (None) must leave the pool exactly as it was.
"""

from __future__ import annotations

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kunlun_triton.memory import PagedKVAllocator, PoolError

import pytest


class AllocatorMachine(RuleBasedStateMachine):
    @initialize(page_size=st.sampled_from([1, 2, 4]), num_pages=st.integers(4, 24))
    def setup(self, page_size, num_pages):
        self.ps = page_size
        self.alloc = PagedKVAllocator(num_pages * page_size, page_size, torch.float16, "cpu", None, False)
        self.num_pages = num_pages
        self.requests: dict[int, list[int]] = {}  # request -> slots in sequence order
        self.holders = [0] * (num_pages + 1)  # model page counts
        self.next_id = 0

    # ------------------------------------------------------------ helpers

    def _snapshot(self):
        pool = self.alloc.pool
        return pool.refcount_table().clone(), pool.free_page_ids().clone(), self.alloc.available_size()

    def _refused(self, before):
        after = self._snapshot()
        assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1]) and before[2] == after[2]

    def _free_pages_model(self):
        return sum(1 for p in range(1, self.num_pages + 1) if self.holders[p] == 0)

    def _take_new_pages(self, slots):
        for page in {s // self.ps for s in slots}:
            if self.holders[page] == 0:
                self.holders[page] = 1

    def _check_new_slots(self, prev_len, slots, last_slot):
        """Token at position pos: same page as the previous token when pos is
        not on a page boundary (continues it at +1), else a page that was free."""
        free_before = [p for p in range(1, self.num_pages + 1) if self.holders[p] == 0]
        seen_new = set()
        for i, s in enumerate(slots):
            pos = prev_len + i
            assert s % self.ps == pos % self.ps
            if pos % self.ps:
                assert s == last_slot + 1, (pos, s, last_slot)
            else:
                page = s // self.ps
                assert page in free_before and page not in seen_new
                seen_new.add(page)
            last_slot = s

    # ------------------------------------------------------------ rules

    @rule(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=3), share=st.booleans())
    def prefill(self, lengths, share):
        aligned = [r for r, slots in self.requests.items() if len(slots) >= self.ps]
        source = aligned[0] if (share and aligned) else None
        prefix = [] if source is None else self.requests[source][: len(self.requests[source]) // self.ps * self.ps]
        pre = torch.tensor([len(prefix)] * len(lengths))
        seq = pre + torch.tensor(lengths)
        last = torch.tensor([prefix[-1] if prefix else -1] * len(lengths))
        before = self._snapshot()
        if prefix:
            for _ in lengths:
                self.alloc.share(torch.tensor(prefix), start_pos=0)
        out = self.alloc.alloc_extend(pre, pre, seq, seq, last, sum(lengths))
        if out is None:
            if prefix:
                for _ in lengths:
                    self.alloc.free_segment(torch.tensor(prefix), start_pos=0)
            need = sum(-(-n // self.ps) for n in lengths)
            assert need > self._free_pages_model()
            self._refused(before)
            return
        out = out.tolist()
        start = 0
        for n in lengths:
            mine = out[start : start + n]
            start += n
            self._check_new_slots(len(prefix), mine, prefix[-1] if prefix else -1)
            self._take_new_pages(mine)
            for page in {s // self.ps for s in prefix}:
                self.holders[page] += 1
            self.requests[self.next_id] = prefix + mine
            self.next_id += 1

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def extend(self, data):
        """A batch of live requests, each extended by 1-7 tokens: partial last
        pages are continued, request by request."""
        ids = data.draw(st.lists(st.sampled_from(sorted(self.requests)), min_size=1, max_size=3, unique=True))
        ids = [r for r in ids if not (len(self.requests[r]) % self.ps and self.holders[self.requests[r][-1] // self.ps] > 1)]
        if not ids:
            return  # never write into a page someone else holds
        ns = [data.draw(st.integers(1, 7)) for _ in ids]
        pre = torch.tensor([len(self.requests[r]) for r in ids])
        seq = pre + torch.tensor(ns)
        last = torch.tensor([self.requests[r][-1] for r in ids])
        before = self._snapshot()
        out = self.alloc.alloc_extend(pre, pre, seq, seq, last, sum(ns))
        if out is None:
            need = sum(-(-int(b) // self.ps) - (-(-int(a) // self.ps)) for a, b in zip(pre, seq))
            assert need > self._free_pages_model()
            self._refused(before)
            return
        out = out.tolist()
        start = 0
        chunks = []
        for r, n in zip(ids, ns):
            mine = out[start : start + n]
            start += n
            self._check_new_slots(len(self.requests[r]), mine, self.requests[r][-1])
            chunks.append(mine)
        new_pages = [s // self.ps for mine, r in zip(chunks, ids) for i, s in enumerate(mine)
                     if (len(self.requests[r]) + i) % self.ps == 0]
        assert len(set(new_pages)) == len(new_pages)
        for r, mine in zip(ids, chunks):
            self._take_new_pages(mine)
            self.requests[r].extend(mine)

    @precondition(lambda self: self.requests)
    @rule()
    def decode(self):
        ids = [r for r, s in self.requests.items() if not (len(s) % self.ps and self.holders[s[-1] // self.ps] > 1)]
        if not ids:
            return
        lens = torch.tensor([len(self.requests[r]) + 1 for r in ids])
        last = torch.tensor([self.requests[r][-1] for r in ids])
        before = self._snapshot()
        out = self.alloc.alloc_decode(lens, lens, last)
        if out is None:
            need = sum(1 for n in lens.tolist() if (n - 1) % self.ps == 0)
            assert need > self._free_pages_model()
            self._refused(before)
            return
        out = out.tolist()
        new_pages = []
        for r, s in zip(ids, out):
            self._check_new_slots(len(self.requests[r]), [s], self.requests[r][-1])
            if (len(self.requests[r])) % self.ps == 0:
                new_pages.append(s // self.ps)
        assert len(set(new_pages)) == len(new_pages)
        for r, s in zip(ids, out):
            self._take_new_pages([s])
            self.requests[r].append(s)

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), grouped=st.booleans(), segment=st.booleans())
    def release(self, data, grouped, segment):
        ids = data.draw(st.lists(st.sampled_from(sorted(self.requests)), min_size=1, max_size=3, unique=True))
        if grouped:
            self.alloc.free_group_begin()
        for r in ids:
            slots = torch.tensor(self.requests.pop(r))
            if segment:
                self.alloc.free_segment(slots, start_pos=0)
            else:
                self.alloc.free(slots)
            for page in {s // self.ps for s in slots.tolist()}:
                self.holders[page] -= 1
        if grouped:
            assert self.alloc.stats().pending_free_pages > 0
            self.alloc.free_group_end()

    @rule()
    def double_free_raises(self):
        free = [p for p in range(1, self.num_pages + 1) if self.holders[p] == 0]
        if not free:
            return
        before = self._snapshot()
        with pytest.raises(PoolError, match=rf"slots {free[0] * self.ps}\.\."):
            self.alloc.free(torch.tensor([free[0] * self.ps]))
        with pytest.raises(PoolError):
            self.alloc.free(torch.tensor([0]))  # slot 0 is padding, never allocated
        self._refused(before)

    @rule()
    def clear(self):
        self.alloc.clear()
        self.requests.clear()
        self.holders = [0] * (self.num_pages + 1)

    # ------------------------------------------------------------ invariants

    @invariant()
    def matches_model(self):
        counts = self.alloc.pool.refcount_table().tolist()
        assert counts == self.holders
        assert self.alloc.available_size() == self._free_pages_model() * self.ps
        stats = self.alloc.stats()
        assert stats.used_pages == self.num_pages - self._free_pages_model()
        assert stats.shared_pages == sum(1 for c in self.holders if c > 1)
        self.alloc.pool.check_consistency()

    @invariant()
    def no_slot_handed_out_twice(self):
        owner = {}
        for r, slots in self.requests.items():
            assert len(set(slots)) == len(slots)
            for s in slots:
                page = s // self.ps
                assert 1 <= page <= self.num_pages  # slot 0's page never handed out
                if s in owner:
                    assert self.holders[page] > 1, f"slot {s} held by {owner[s]} and {r} on an unshared page"
                owner[s] = r


AllocatorMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=25, deadline=None)
TestAllocatorMachine = AllocatorMachine.TestCase
