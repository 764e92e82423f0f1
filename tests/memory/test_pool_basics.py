"""Sizing arithmetic, error messages, and SGLang's own allocator as an oracle
(the last only where SGLang is installed)."""

from __future__ import annotations

import pytest
import torch

from kunlun_triton.memory import PagedKVAllocator, PoolError, kv_bytes_per_token, plan_kv_pool


def test_sizing_follows_mem_fraction_static():
    # llama-3-8b: 32 layers x 8 kv heads x 128 x 2 (K, V) x 2 bytes = 131072 B/token
    assert kv_bytes_per_token(32, 8, 128, torch.float16) == 131072
    gib = 1 << 30
    plan = plan_kv_pool(num_layers=32, num_kv_heads=8, head_dim=128, dtype=torch.float16,
                        mem_fraction_static=0.8, page_size=16, total_memory=80 * gib, taken_memory=16 * gib)
    budget = int(80 * gib * 0.8) - 16 * gib
    assert plan.budget_bytes == budget
    assert plan.num_pages == budget // (131072 * 16) - 1  # one page of padding
    assert "pages x 16" in str(plan)
    alloc = PagedKVAllocator.from_memory_fraction(
        num_layers=2, num_kv_heads=1, head_dim=4, dtype=torch.float32, mem_fraction_static=0.5,
        page_size=4, total_memory=1 << 20, taken_memory=0)
    assert alloc.sizing.num_tokens == alloc.size == alloc.available_size()
    with pytest.raises(ValueError, match="no memory left"):
        plan_kv_pool(num_layers=1, num_kv_heads=1, head_dim=1, dtype=torch.float16, mem_fraction_static=0.1,
                     total_memory=100, taken_memory=50)


def test_host_memory_is_used_on_cpu():
    plan = plan_kv_pool(num_layers=1, num_kv_heads=1, head_dim=8, dtype=torch.float16,
                        mem_fraction_static=0.9, page_size=64)
    assert plan.memory_source.startswith("host") and plan.num_pages > 0


def test_errors_name_the_slots_and_change_nothing():
    alloc = PagedKVAllocator(32, 4, torch.float16, "cpu", None, False)
    slots = alloc.alloc(8)
    alloc.free(slots)
    with pytest.raises(PoolError, match=r"page 1 \(slots 4\.\.7\)"):
        alloc.free(slots)
    with pytest.raises(PoolError):
        alloc.free(torch.tensor([1000]))  # outside the pool
    with pytest.raises(PoolError, match="below zero"):
        x = alloc.alloc(4)
        alloc.free_page_ids(torch.cat((x[:1], x[:1])) // 4)  # the same page released twice
    assert alloc.available_size() == 28
    alloc.pool.check_consistency()
    unchecked = PagedKVAllocator(32, 4, torch.float16, "cpu", None, False, checked=False)
    assert not unchecked.checked


def _sglang_allocator(size, page_size):
    pytest.importorskip("sglang")
    from kunlun_triton.sglang_plugin.tools.baselines.allocator import sglang_paged_allocator

    return sglang_paged_allocator(size, page_size)


@pytest.mark.sglang
@pytest.mark.parametrize("page_size", [2, 4, 16])
def test_same_slots_as_sglang_until_the_first_free(page_size):
    """Both start from ascending free pages; before any free, SGLang's
    PagedTokenToKVPoolAllocator and ours must hand out identical slots.
    (SGLang uses this class only for page_size > 1: at 1 its decode path
    counts no new pages.)"""
    size = 64 * page_size
    theirs, ours = _sglang_allocator(size, page_size), PagedKVAllocator(size, page_size, torch.float16, "cpu", None, False)
    g = torch.Generator().manual_seed(page_size)
    prefix = torch.tensor([0, 0, 0])
    seq = torch.randint(1, 3 * page_size + 2, (3,), generator=g)
    last = torch.tensor([-1, -1, -1])
    outs = [a.alloc_extend(prefix, prefix, seq, seq, last, int(seq.sum())) for a in (theirs, ours)]
    assert torch.equal(outs[0], outs[1])
    ends = torch.cumsum(seq, 0) - 1
    last = outs[1][ends]
    for step in range(2 * page_size + 1):
        seq = seq + 1
        got = [a.alloc_decode(seq, seq, last) for a in (theirs, ours)]
        assert torch.equal(got[0], got[1]), step
        last = got[1]
        assert theirs.available_size() == ours.available_size()
    # extend with partial pages continued
    more = torch.tensor([1, page_size, 2 * page_size + 1])
    outs = [a.alloc_extend(seq, seq, seq + more, seq + more, last, int(more.sum())) for a in (theirs, ours)]
    assert torch.equal(outs[0], outs[1])
    assert theirs.available_size() == ours.available_size()
    # too large: both refuse
    assert theirs.alloc(size) is None and ours.alloc(size) is None
