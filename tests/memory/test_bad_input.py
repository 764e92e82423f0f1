"""Bad sizes and bad frees against the allocator: each is refused (or, in a
free group, dropped) and nothing else changes. The oracle is a plain Python
model of the pool (free page count, a holder count per page); hypothesis
draws the sizes (negative, fractional, unaligned, beyond the capacity,
numpy integers) and the order of good and bad frees in a group.

Before the fix, ``alloc(-4)`` on a 32-slot pool handed out 28 slots and left
``available_size()`` at 36, and one bad free in a free group dropped every
free of the group (the pages leaked)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kunlun_triton.memory import BlockPool, PagedKVAllocator, PoolError

NUM_PAGES = 8


def _allocator(ps, taken_pages=0, num_pages=NUM_PAGES):
    alloc = PagedKVAllocator(num_pages * ps, ps, torch.float16, "cpu", None, False)
    held = alloc.alloc(taken_pages * ps) if taken_pages else None
    return alloc, held


def _snapshot(alloc):
    pool = alloc.pool
    return pool.refcount_table().clone(), pool.free_page_ids().clone(), alloc.available_size()


def _unchanged(alloc, before):
    after = _snapshot(alloc)
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1]) and before[2] == after[2]
    alloc.pool.check_consistency()


def sizes(capacity):
    """Integers well outside 0..capacity, unaligned ones, floats (whole and
    not), bools, numpy integers and 0-d tensors."""
    ints = st.integers(-3 * capacity - 1, 3 * capacity + 1)
    return st.one_of(
        ints,
        ints.map(np.int64),
        ints.map(np.int32),
        ints.map(torch.tensor),
        st.floats(-2.0 * capacity, 2.0 * capacity),
        st.sampled_from([True, False, float("inf"), float("nan"), "8", None, 2**70, -(2**70)]),
    )


def _as_valid_int(value):
    """The int a size stands for, or None when it must be refused."""
    if isinstance(value, (bool, float, str)) or value is None:
        return None
    if isinstance(value, torch.Tensor):
        return int(value)
    return int(value)


@settings(max_examples=60, deadline=None)
@given(ps=st.sampled_from([1, 4, 16]), taken=st.integers(0, NUM_PAGES), data=st.data())
def test_alloc_sizes(ps, taken, data):
    alloc, _ = _allocator(ps, taken)
    capacity = NUM_PAGES * ps
    need = data.draw(sizes(capacity), label="need_size")
    n = _as_valid_int(need)
    before = _snapshot(alloc)
    if n is None or n < 0 or n % ps or n > capacity:
        with pytest.raises((ValueError, TypeError), match="need_size"):
            alloc.alloc(need)
        _unchanged(alloc, before)
        return
    out = alloc.alloc(need)
    free_pages = NUM_PAGES - taken
    if n // ps > free_pages:
        assert out is None
        _unchanged(alloc, before)
        return
    assert out.numel() == n and len(set(out.tolist())) == n
    assert all(s // ps >= 1 for s in out.tolist())  # page 0 is padding
    assert alloc.available_size() == (free_pages - n // ps) * ps
    alloc.pool.check_consistency()


@settings(max_examples=40, deadline=None)
@given(taken=st.integers(0, NUM_PAGES), data=st.data())
def test_block_pool_take_sizes(taken, data):
    pool = BlockPool(NUM_PAGES, 4)
    pool.take(taken)
    n_arg = data.draw(sizes(NUM_PAGES), label="n")
    n = _as_valid_int(n_arg)
    counts, free = pool.refcount_table().clone(), pool.free_page_ids().clone()
    if n is None or n < 0:
        with pytest.raises((ValueError, TypeError), match="take"):
            pool.take(n_arg)
    elif n > NUM_PAGES - taken:
        assert pool.take(n_arg) is None
    else:
        assert pool.take(n_arg).numel() == n
        assert pool.free_page_count == NUM_PAGES - taken - n
        pool.check_consistency()
        return
    assert torch.equal(pool.refcount_table(), counts) and torch.equal(pool.free_page_ids(), free)
    pool.check_consistency()


@st.composite
def extend_calls(draw):
    """alloc_extend arguments, each maybe broken: a prefix longer than its
    sequence, a negative one, extend_num_tokens or num_new_pages off by some
    amount (negative included), one argument with the wrong length."""
    ps = draw(st.sampled_from([1, 4, 16]))
    bs = draw(st.integers(1, 3))
    prefix = [draw(st.integers(-2, 3 * ps)) for _ in range(bs)]
    seq = [p + draw(st.integers(-3, 2 * ps)) for p in prefix]
    tokens_off = draw(st.sampled_from([0, 0, 0, 1, -1, -(10**6)]))
    pages_off = draw(st.sampled_from([None, None, 0, 1, -1, -5]))
    short = draw(st.sampled_from([None, None, None, "last_loc", "seq_lens_cpu"]))
    return ps, prefix, seq, tokens_off, pages_off, short


@settings(max_examples=60, deadline=None)
@given(call=extend_calls())
def test_alloc_extend_bad_lengths_change_nothing(call):
    ps, prefix, seq, tokens_off, pages_off, short = call
    alloc, _ = _allocator(ps, num_pages=32)
    # every prefix lives on pages the request holds (its last slot, last_loc)
    last = []
    for p in prefix:
        row = alloc.alloc(-(-p // ps) * ps) if p > 0 else None
        last.append(int(row[p - 1]) if row is not None else -1)
    pre_t, seq_t, last_t = torch.tensor(prefix), torch.tensor(seq), torch.tensor(last)
    tokens = sum(s - p for p, s in zip(prefix, seq)) + tokens_off
    needed = sum(-(-s // ps) - (-(-p // ps)) for p, s in zip(prefix, seq))
    num_new_pages = None if pages_off is None else needed + pages_off
    args = {"seq_lens_cpu": seq_t, "last_loc": last_t}
    if short:
        args[short] = args[short][:-1] if len(prefix) > 1 else torch.cat((args[short], args[short]))
    valid = (min(prefix) >= 0 and all(s >= p for p, s in zip(prefix, seq)) and tokens_off == 0
             and pages_off in (None, 0) and short is None)
    before = _snapshot(alloc)

    def call():
        return alloc.alloc_extend(pre_t, pre_t, seq_t, args["seq_lens_cpu"], args["last_loc"], tokens,
                                  num_new_pages)

    if not valid:
        with pytest.raises(ValueError, match="alloc_extend"):
            call()
        _unchanged(alloc, before)
        return
    out = call()
    assert out is not None and out.numel() == tokens
    assert alloc.available_size() == before[2] - needed * ps
    alloc.pool.check_consistency()


@pytest.mark.parametrize("bad", ["short_last_loc", "float_lens", "list_lens", "2d_lens"])
def test_alloc_decode_bad_arguments_change_nothing(bad):
    alloc, held = _allocator(4, 2)
    seq = torch.tensor([3, 5])
    last = torch.tensor([int(held[1]), int(held[5]) - 1])
    seq_cpu = seq
    if bad == "short_last_loc":
        last = last[:1]
    elif bad == "2d_lens":
        seq_cpu = seq.view(2, 1)
    elif bad == "float_lens":
        seq_cpu = seq.float()
    else:
        seq_cpu = [3, 5]
    before = _snapshot(alloc)
    with pytest.raises((ValueError, TypeError), match="alloc_decode"):
        alloc.alloc_decode(seq, seq_cpu, last)
    _unchanged(alloc, before)


@settings(max_examples=30, deadline=None)
@given(ps=st.sampled_from([1, 4, 16]), lens=st.lists(st.integers(-40, 40), min_size=1, max_size=6))
def test_alloc_decode_lengths_never_unbalance_the_pool(ps, lens):
    """seq_lens' values are not range-checked (a check costs more than the
    rest of a decode step's host work); whatever they are, the pages taken
    are exactly the requests at a page boundary, and the pool balances."""
    alloc, _ = _allocator(ps, num_pages=8)
    seq = torch.tensor(lens)
    last = torch.arange(len(lens)) * ps  # slots of page 0..: never read for a boundary request
    boundary = sum(1 for n in lens if n % ps == 1 % ps)
    out = alloc.alloc_decode(seq, seq, last)
    if boundary > NUM_PAGES:
        assert out is None
    else:
        assert out is not None and out.numel() == len(lens)
        assert alloc.available_size() == (NUM_PAGES - boundary) * ps
    alloc.pool.check_consistency()


@pytest.mark.parametrize("method", ["free", "free_page_ids", "free_segment", "share"])
@pytest.mark.parametrize("grouped", [False, True])
def test_ids_that_are_not_integers_are_refused(method, grouped):
    """Float ids: TypeError naming the call; bool ids (pages 0/1 after the
    slot -> page division) and lists are refused too. Nothing changes; in a
    group the good frees still happen."""
    alloc, held = _allocator(4, 3)
    good = alloc.alloc(4)
    before = _snapshot(alloc)
    call = getattr(alloc, method)
    kwargs = {"start_pos": 0} if method == "free_segment" else {}
    ids = held // 4 if method == "free_page_ids" else held
    for bad in (ids.float(), ids > 0, ids.tolist()):
        if grouped and method != "share":
            alloc.free_group_begin()
            alloc.free(good)
            try:
                call(bad, **kwargs)
            except (TypeError, AttributeError, PoolError):
                alloc.free_group_end()  # refused at the call
            else:
                with pytest.raises((TypeError, PoolError)):
                    alloc.free_group_end()  # refused at the group's end
            assert alloc.available_size() == before[2] + 4  # the good free happened, the bad one did nothing
            assert torch.equal(alloc.pool.refcount_table()[held // 4], torch.ones(12, dtype=torch.int32))
            alloc.pool.check_consistency()
            good = alloc.alloc(4)
            continue
        with pytest.raises((TypeError, AttributeError, PoolError)) as info:
            call(bad, **kwargs)
        if bad is not None and getattr(bad, "dtype", None) == torch.float32:
            assert info.type is TypeError and method in str(info.value) or "free" in str(info.value)
        _unchanged(alloc, before)


# ------------------------------------------------------------ free groups


@st.composite
def group_frees(draw):
    """A few requests (one may share another's first page) and a free group
    calling, in any order, good frees and bad ones: a second free of a
    request, a page never handed out, ids outside the pool."""
    ps = draw(st.sampled_from([1, 4]))
    sizes_ = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))  # pages per request
    share = draw(st.booleans()) and len(sizes_) > 1
    kinds = st.one_of(
        st.tuples(st.just("free"), st.integers(0, len(sizes_) - 1), st.sampled_from(["free", "segment", "pages"])),
        st.tuples(st.just("never"), st.integers(0, 2), st.sampled_from(["free", "pages"])),
        st.tuples(st.just("outside"), st.sampled_from([10**6, -1, 17]), st.sampled_from(["free", "pages"])),
    )
    calls = draw(st.lists(kinds, min_size=1, max_size=7))
    return ps, sizes_, share, calls


@settings(max_examples=60, deadline=None)
@given(case=group_frees())
def test_a_bad_free_in_a_group_loses_no_pages(case):
    """After the group, whatever was refused: every good free happened,
    counts equal the model's, and free pages + pages held = capacity."""
    ps, sizes_, share, calls = case
    num_pages = 16
    alloc = PagedKVAllocator(num_pages * ps, ps, torch.float16, "cpu", None, False)
    rows = [alloc.alloc(n * ps) for n in sizes_]
    model = [0] * (num_pages + 1)
    for row in rows:
        for page in set((row // ps).tolist()):
            model[page] = 1
    if share:  # request 1 also holds request 0's first page
        alloc.share(rows[0][:ps], start_pos=0)
        rows[1] = torch.cat((rows[0][:ps], rows[1]))
        model[int(rows[0][0]) // ps] += 1
    never = [p for p in range(1, num_pages + 1) if model[p] == 0]
    assert num_pages + 1 == 17  # "outside" page 17: just past the pool

    alloc.free_group_begin()
    deferred = []  # (pages named, counted) per call that reached the group
    for kind, arg, how in calls:
        if kind == "free":
            slots = rows[arg]
        elif kind == "never":
            slots = torch.tensor([never[arg] * ps])
        else:
            slots = torch.tensor([arg * ps])  # page `arg`
        if how == "free":
            try:
                alloc.free(slots)
            except PoolError as exc:  # caught at the call (ids the de-duplication cannot index)
                assert kind == "outside" and "outside the pool" in str(exc)
                continue
            deferred.append(sorted(set((slots // ps).tolist())))
        elif how == "segment":
            alloc.free_segment(slots, start_pos=0)
            deferred.append((slots[::ps] // ps).tolist())
        else:
            pages = slots // ps
            alloc.free_page_ids(pages)
            deferred.append(pages.tolist())

    # the model: calls in order, a call that would take a count below zero
    # (or names an id outside 1..num_pages) is dropped whole
    refused = 0
    for pages in deferred:
        need = {p: pages.count(p) for p in pages}
        if all(1 <= p <= num_pages and model[p] >= m for p, m in need.items()):
            for p, m in need.items():
                model[p] -= m
        else:
            refused += 1
    if refused:
        with pytest.raises(PoolError, match=f"{refused} of the {len(deferred)} frees" if len(deferred) > 1 else None):
            alloc.free_group_end()
    else:
        alloc.free_group_end()
    assert alloc.pool.refcount_table().tolist() == model
    held = sum(1 for p in range(1, num_pages + 1) if model[p] > 0)
    assert alloc.available_size() // ps + held == num_pages
    alloc.pool.check_consistency()
    assert alloc.free_group is None  # the group is closed either way


@pytest.mark.parametrize("checked", [True, False])
@pytest.mark.parametrize("page", [NUM_PAGES + 1, NUM_PAGES + 4, 2 * NUM_PAGES + 1, -1])
def test_ids_outside_the_pool_are_refused_in_both_modes(checked, page):
    """Issue 25: unchecked, share/free of page 12 in an 8-page pool went
    through (the refcount table's upper half), left available_size() above
    the pool and later handed page 12 out. Both modes refuse it on the CPU
    and change nothing; the pool still hands out only pages 1..8."""
    ps = 4
    alloc = PagedKVAllocator(NUM_PAGES * ps, ps, torch.float16, "cpu", None, False)
    alloc.pool.checked = checked
    held = alloc.alloc(2 * ps)
    before = _snapshot(alloc)
    slots = torch.arange(page * ps, page * ps + ps, dtype=torch.int64)
    for call in (lambda: alloc.free(slots), lambda: alloc.pool.share(torch.tensor([page])),
                 lambda: alloc.pool.release(torch.tensor([page])), lambda: alloc.pool.release(torch.tensor([page]), counted=True)):  # fmt: skip
        with pytest.raises(PoolError, match="outside the pool"):
            call()
        _unchanged(alloc, before)
    rest = alloc.alloc((NUM_PAGES - 2) * ps)
    assert rest is not None and alloc.alloc(ps) is None and alloc.available_size() == 0
    pages = torch.cat([held, rest]) // ps
    assert sorted(pages.unique().tolist()) == list(range(1, NUM_PAGES + 1))
