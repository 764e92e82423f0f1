"""build_kv_indices (a captured decode step's paged metadata) against the torch reference."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.ops import build_kv_indices
from kunlun_triton.ops.attention import reference


def _table(rows=5, max_len=1100, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, 10_000, (rows, max_len), generator=gen, dtype=torch.int32).to(DEVICE)


@pytest.mark.parametrize("check", [True, False])
def test_build_kv_indices_matches_reference(check):
    table = _table()
    ids = torch.tensor([3, 0, 4, 1], device=DEVICE)
    lens = torch.tensor([1100, 0, 513, 7], device=DEVICE)  # a full row, an empty one, a chunk + 1
    capacity = 4 * 1100
    indptr, indices = build_kv_indices(table, ids, lens, torch.full((5,), -1, dtype=torch.int32, device=DEVICE),
                                       torch.full((capacity,), -1, dtype=torch.int32, device=DEVICE), check=check)
    want_ptr, want = reference.build_kv_indices(table.cpu(), ids.cpu(), lens.cpu(), torch.zeros(5, dtype=torch.int32),
                                                torch.full((capacity,), -1, dtype=torch.int32))
    assert torch.equal(indptr.cpu(), want_ptr) and torch.equal(indices.cpu(), want)
    assert indptr.tolist() == [0, 1100, 1100, 1613, 1620]
    assert torch.equal(indices[1100:1613].cpu(), table[4, :513].cpu())


def test_build_kv_indices_rejects_bad_input_and_changes_nothing():
    table = _table(rows=2, max_len=8)
    indptr, indices = torch.zeros(3, dtype=torch.int32, device=DEVICE), torch.zeros(16, dtype=torch.int32, device=DEVICE)
    ids = torch.tensor([0, 1], device=DEVICE)
    bad = [
        (dict(seq_lens=torch.tensor([9, 1], device=DEVICE)), "seq_lens"),
        (dict(req_pool_indices=torch.tensor([0, 2], device=DEVICE)), "req_pool_indices"),
        (dict(kv_indices=torch.zeros(3, dtype=torch.int32, device=DEVICE)), "kv_indices holds"),
        (dict(kv_indptr=torch.zeros(3, dtype=torch.int64, device=DEVICE)), "int32"),
        (dict(kv_indptr=torch.zeros(2, dtype=torch.int32, device=DEVICE)), "kv_indptr"),
        (dict(seq_lens=torch.tensor([1.0, 2.0], device=DEVICE)), "seq_lens"),
    ]
    for change, match in bad:
        args = dict(req_to_token=table, req_pool_indices=ids, seq_lens=torch.tensor([8, 2], device=DEVICE),
                    kv_indptr=indptr, kv_indices=indices)
        args.update(change)
        with pytest.raises((ValueError, TypeError), match=match):
            build_kv_indices(**args)
        assert not indices.any() and not indptr.any()


@pytest.mark.parametrize("where", ["indices after indptr", "indices over indptr", "indptr over seq_lens"])
def test_outputs_sharing_memory_are_refused_and_nothing_changes(where):
    """Issue 25: kv_indptr and kv_indices as views of one buffer wrote garbage."""
    table, ids = _table(rows=3, max_len=8), torch.tensor([0, 2], device=DEVICE)
    buf = torch.full((40,), -1, dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([3, 4], dtype=torch.int32, device=DEVICE)
    indptr, indices = {"indices after indptr": (buf[:3], buf[2:20]), "indices over indptr": (buf[5:8], buf[:20]),
                       "indptr over seq_lens": (buf[:3], buf[10:30])}[where]  # fmt: skip
    if where == "indptr over seq_lens":
        lens = buf[1:3]
        lens.copy_(torch.tensor([3, 4], dtype=torch.int32))
    before = buf.clone()
    with pytest.raises(ValueError, match="share memory"):
        build_kv_indices(table, ids, lens, indptr, indices)
    assert torch.equal(buf, before)
    # disjoint views of the same buffer are fine: same answer as the reference
    indptr, indices = buf[:3], buf[3:10]
    build_kv_indices(table, ids, torch.tensor([3, 4], device=DEVICE), indptr, indices)
    assert indptr.tolist() == [0, 3, 7] and torch.equal(indices.cpu(), torch.cat([table[0, :3], table[2, :4]]).cpu())
