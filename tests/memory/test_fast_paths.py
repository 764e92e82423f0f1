"""The allocator's fast paths against plain Python: extend slots at real page
sizes (one request without a partial page is a slice, more are a gather,
partial pages a second table), releases that name a page more than once, out
of range ids (checked before any count moves), and the bench trace's replay."""

from __future__ import annotations

import pytest
import torch

from kunlun_triton.memory import PagedKVAllocator, PoolError


def _expected_extend(free_pages, prefix, seq, last, ps):
    """Token pos of request i: continues last_loc while on the prefix's page,
    then takes the next free page at every page boundary."""
    out, taken = [], iter(free_pages)
    for p, s, loc in zip(prefix, seq, last):
        page = None
        for pos in range(p, s):
            if pos < -(-p // ps) * ps:
                out.append(loc + 1 + pos - p)
            else:
                if pos % ps == 0 or page is None:
                    page = next(taken)
                out.append(page * ps + pos % ps)
    return out


@pytest.mark.parametrize("ps", [16, 64])
@pytest.mark.parametrize("bs", [1, 2, 4])
def test_extend_matches_python(ps, bs):
    g = torch.Generator().manual_seed(ps * 10 + bs)
    alloc = PagedKVAllocator(512 * ps, ps, torch.float16, "cpu", None, False)
    alloc.alloc(7 * ps)  # free stack no longer starts at page 1
    for partial in (False, True):
        # requests that already hold a prefix (from their own pages)
        pre = torch.randint(0, 3 * ps, (bs,), generator=g)
        if not partial:
            pre = pre // ps * ps
        seq = pre + torch.randint(1, 4 * ps, (bs,), generator=g)
        last = []
        for n in pre.tolist():
            if n:
                row = alloc.alloc(-(-n // ps) * ps)
                last.append(int(row[n - 1]))
            else:
                last.append(-1)
        free = alloc.get_all_free_pages().tolist()
        last_t = torch.tensor(last)
        out = alloc.alloc_extend(pre, pre, seq, seq, last_t, int((seq - pre).sum()))
        assert out.tolist() == _expected_extend(free, pre.tolist(), seq.tolist(), last, ps)
        alloc.pool.check_consistency()


def test_group_release_of_a_page_named_twice():
    ps = 4
    alloc = PagedKVAllocator(16 * ps, ps, torch.float16, "cpu", None, False)
    prefix = alloc.alloc(2 * ps)
    alloc.share(prefix, start_pos=0)  # two holders
    a, b = alloc.alloc(ps), alloc.alloc(ps)
    before = alloc.available_size()
    alloc.free_group_begin()
    alloc.free_segment(torch.cat((prefix, a)), start_pos=0)
    alloc.free_segment(torch.cat((prefix, b)), start_pos=0)
    alloc.free_group_end()
    assert alloc.available_size() == before + 4 * ps  # prefix pages back once each
    alloc.pool.check_consistency()
    # one call naming a page twice: two holders letting go
    x = alloc.alloc(ps)
    alloc.share(x, start_pos=0)
    alloc.free_page_ids(torch.cat((x[:1], x[:1])) // ps)
    assert alloc.available_size() == 16 * ps
    alloc.pool.check_consistency()


@pytest.mark.parametrize("bad", [10**9, -(10**9), -1])
def test_out_of_range_ids_change_nothing(bad):
    ps = 4
    alloc = PagedKVAllocator(8 * ps, ps, torch.float16, "cpu", None, False)
    x = alloc.alloc(3 * ps)
    counts = alloc.pool.refcount_table().clone()
    for call in (lambda: alloc.free(torch.cat((x, torch.tensor([bad])))),
                 lambda: alloc.free_page_ids(torch.cat((x[::ps] // ps, torch.tensor([bad])))),
                 lambda: alloc.share(torch.cat((x, torch.tensor([bad]))))):
        with pytest.raises(PoolError):
            call()
        assert torch.equal(alloc.pool.refcount_table(), counts)
    alloc.free_group_begin()
    alloc.free_page_ids(torch.cat((x[::ps] // ps, torch.tensor([bad]))))
    with pytest.raises(PoolError):
        alloc.free_group_end()
    assert torch.equal(alloc.pool.refcount_table(), counts)
    alloc.pool.check_consistency()


def _replays(alloc, spec, refcounted):
    from kunlun_triton.tools.allocator_bench import _timed_replay, record_trace

    calls = record_trace(alloc, spec, refcounted=refcounted)
    run = _timed_replay(alloc, calls, threads=1)  # checks the replay reproduces the run
    run()
    return calls


def test_bench_trace_replays_ours():
    from kunlun_triton.tools.allocator_bench import TraceSpec, _kunlun_allocator

    spec = TraceSpec(steps=40, page_size=16, pool_tokens=64 * 1024)
    alloc = _kunlun_allocator(spec, "cpu")
    calls = _replays(alloc, spec, refcounted=True)
    assert {"share", "alloc_extend", "alloc_decode", "free_group_end"} <= {c[0] for c in calls}
    alloc.pool.check_consistency()


@pytest.mark.sglang
def test_bench_trace_replays_sglang():
    pytest.importorskip("sglang")
    from kunlun_triton.tools.allocator_bench import TraceSpec, _sglang_allocator

    spec = TraceSpec(steps=40, page_size=16, pool_tokens=64 * 1024)
    calls = _replays(_sglang_allocator(spec, "cpu"), spec, refcounted=False)
    assert "share" not in {c[0] for c in calls}
