"""The token-to-expert alignment (no atomics) against torch's stable sort:
slots sorted by expert in slot order, and a block table where an expert
with no token owns no block."""

import importlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.ops.moe import align
from kunlun_triton.ops.spec import explicit_config

plan_module = importlib.import_module("kunlun_triton.ops.moe.experts_plan")


def _align(ids, experts, block_m, align_tile):
    config = explicit_config("fused_experts", {"BLOCK_M": block_m, "ALIGN_TILE": align_tile}, tokens=1,
                             num_experts=experts, top_k=1, hidden_size=16, intermediate_size=16)  # fmt: skip
    plan = plan_module.ExpertsPlan(experts, 1, 16, 16, torch.float32, "silu", False, "sum", config)
    index, bound = plan_module.align_slots(ids.to(DEVICE), experts, plan)
    index = index.cpu()  # the block table, then the sorted slots
    return index[3 * bound : 3 * bound + ids.numel()], index[: 3 * bound].view(bound, 3), plan.block_m


def _check(ids, experts, block_m, align_tile=16):
    sorted_slots, table, block_m = _align(ids, experts, block_m, align_tile)
    flat = ids.reshape(-1).long()
    valid = (flat >= 0) & (flat < experts)
    order = torch.sort(torch.where(valid, flat, experts), stable=True).indices[: int(valid.sum())]
    assert torch.equal(sorted_slots[: order.numel()].long(), order), "slots sorted by expert, in slot order"

    counts = torch.bincount(flat[valid], minlength=experts)
    starts = torch.cumsum(counts, 0) - counts
    real = table[:, 0] >= 0
    assert int(real.sum()) == int(((counts + block_m - 1) // block_m).sum())
    assert bool((table[~real, 0] == -1).all()) and not bool(real[int(real.sum()) :].any()), "sentinels last"
    covered = torch.zeros(order.numel(), dtype=torch.int64)
    for expert, first, end in table[real].tolist():
        assert counts[expert] > 0, f"expert {expert} has no token but owns a block"
        assert starts[expert] <= first < end <= starts[expert] + counts[expert] and end - first <= block_m
        covered[first:end] += 1
    assert bool((covered == 1).all()), "every sorted row in exactly one block"


@given(
    tokens=st.integers(1, 120),
    top_k=st.sampled_from([1, 2, 8]),
    experts=st.sampled_from([1, 3, 8, 60, 256]),
    block_m=st.sampled_from([1, 4, 16, 64]),
    skew=st.sampled_from(["uniform", "one", "outside"]),
    align_tile=st.sampled_from([16, 64]),  # compiled targets: 16; the interpreter: 64
    seed=st.integers(0, 2**31 - 1),
)
def test_alignment_matches_a_stable_sort(tokens, top_k, experts, block_m, skew, align_tile, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, experts, (tokens, top_k), generator=gen)
    if skew == "one":
        ids[:] = int(torch.randint(0, experts, (1,), generator=gen))
    elif skew == "outside":  # expert parallelism's -1 and stray ids take no slot
        ids[torch.rand(ids.shape, generator=gen) < 0.3] = -1
        ids[0, 0] = experts
    _check(ids.to(torch.int32), experts, block_m, align_tile)


# 16800 slots in 16-wide tiles: ~110 s under the interpreter, so 64 there
@pytest.mark.parametrize("tokens,top_k,experts,align_tile", [(40, 8, 128, 16), (2100, 8, 64, 64)])
def test_many_chunks(tokens, top_k, experts, align_tile):
    """320 slots (two chunks) and 16800 (past MAX_CHUNKS x MIN_CHUNK: the chunk grows)."""
    assert tokens * top_k > align.SINGLE_PROGRAM_SLOTS
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.randint(0, experts // 2, (tokens, top_k), generator=gen) * 2  # odd experts get nothing
    _check(ids.to(torch.int64), experts, 16, align_tile)
