"""decode_attention against the per-request torch reference."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import DEVICE, decode_cases

from kunlun_triton.introspect.paged import decode_batch
from kunlun_triton.ops import decode_attention
from kunlun_triton.ops.attention import reference as attention_reference
from kunlun_triton.testing import assert_close

FORMULATIONS = ("dot", "sum")


def reference(batch):
    return attention_reference.decode_attention(*batch.args(), **batch.kwargs())


@pytest.mark.parametrize("formulation", FORMULATIONS)
@given(batch=decode_cases(), splits=st.sampled_from([None, 1, 3]))
def test_decode_matches_reference(formulation, batch, splits):
    out = decode_attention(*batch.args(), **batch.kwargs(), num_kv_splits=splits, formulation=formulation)
    assert_close(out, reference(batch), scale=2, msg=f"lens {batch.pool.lens} page {batch.pool.page_size}")


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 256, 13])
def test_decode_head_dims(formulation, head_dim):
    batch = decode_batch([9, 33], q_heads=4, kv_heads=2, head_dim=head_dim, dtype=torch.float16, page_size=16, seed=head_dim,
                         device=DEVICE)
    out = decode_attention(*batch.args(), num_kv_splits=2, formulation=formulation)
    assert_close(out, reference(batch))


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_decode_v_head_dim_differs(formulation):
    batch = decode_batch([12, 5], q_heads=2, kv_heads=1, head_dim=32, v_head_dim=16, dtype=torch.float32, seed=3, device=DEVICE)
    out = decode_attention(*batch.args(), num_kv_splits=2, formulation=formulation)
    assert out.shape == (2, 2, 16)
    assert_close(out, reference(batch))


@settings(max_examples=3)
@given(splits=st.integers(1, 9))
def test_decode_split_count_does_not_change_result(splits):
    """The lse merge is exact: any split count gives the one-split answer."""
    batch = decode_batch([40, 1, 0, 21], q_heads=6, kv_heads=2, head_dim=16, dtype=torch.float32, page_size=16, seed=5,
                         device=DEVICE)
    one = decode_attention(*batch.args(), num_kv_splits=1)
    many = decode_attention(*batch.args(), num_kv_splits=splits)
    assert_close(many, one)
    assert_close(one, reference(batch))


def test_workspace_gives_the_same_answer():
    """The SGLang backend's path: one workspace per step, shared by layers."""
    from kunlun_triton.ops import decode_workspace

    batch = decode_batch([40, 1, 0, 21], q_heads=6, kv_heads=2, head_dim=16, dtype=torch.float32, seed=6, device=DEVICE)
    ws = decode_workspace(4, 6, 2, 16, 16, DEVICE, num_kv_splits=3)
    assert ws.max_splits == 3 and ws.part_out.shape == (4, 6, 3, 16)
    plain = decode_attention(*batch.args(), num_kv_splits=3)
    for _ in range(2):  # reused by the next "layer"
        assert torch.equal(decode_attention(*batch.args(), workspace=ws), plain)
    assert_close(plain, reference(batch))


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_fixed_split_tiles_are_batch_invariant(formulation):
    """split_tile_size: a request's splits depend on its own length only, so
    its output is bitwise the same in any batch (deterministic inference)."""
    from kunlun_triton.ops import decode_workspace

    lens = [70, 3, 129, 33]
    full = decode_batch(lens, q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float16, seed=8, device=DEVICE)
    together = decode_attention(*full.args(), split_tile_size=32, formulation=formulation)
    assert_close(together, reference(full))
    p = full.pool
    for b in range(len(lens)):
        slots = p.slots(b)
        indptr = torch.tensor([0, len(slots)], dtype=torch.int32, device=DEVICE)
        alone = torch.empty_like(together[b : b + 1])
        ws = decode_workspace(1, 4, 2, 32, 32, DEVICE, split_tile_size=32, max_context_len=256)
        decode_attention(full.q[b : b + 1], p.k_buffer, p.v_buffer, alone, indptr, slots, full.sm_scale,
                         workspace=ws, formulation=formulation)  # fmt: skip
        assert torch.equal(alone[0], together[b]), f"request {b} changed with its batch mates"


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda ws: ws.__class__(ws.part_out[:, :3], ws.part_lse[:, :3], ws.split_tokens), "part_out must be contiguous fp32"),
        (lambda ws: ws.__class__(ws.part_out, ws.part_lse[:1], ws.split_tokens), "part_lse"),  # any split count
        (lambda ws: ws.__class__(ws.part_out, ws.part_lse, 0), "split_tokens must be >= 1"),
    ],
)
def test_a_bad_workspace_is_refused(make, pattern):
    from kunlun_triton.ops import decode_workspace

    batch = decode_batch([5, 3], q_heads=4, kv_heads=2, head_dim=16, dtype=torch.float16, device=DEVICE)
    ws = make(decode_workspace(2, 4, 2, 16, 16, DEVICE))
    o = batch.args()[3].zero_()
    with pytest.raises(ValueError, match=pattern):
        decode_attention(*batch.args()[:3], o, *batch.args()[4:], workspace=ws)
    assert not o.any(), "a refused call must leave its output alone"
    with pytest.raises(ValueError, match="workspace brings its own split plan"):
        decode_attention(*batch.args(), workspace=decode_workspace(2, 4, 2, 16, 16, DEVICE), num_kv_splits=2)


@pytest.mark.parametrize("q_heads,kv_heads", [(5, 2), (3, 4)])
def test_decode_workspace_refuses_a_head_split_decode_refuses(q_heads, kv_heads):
    """Issue 25: decode_workspace built a workspace for heads decode_attention rejects."""
    from kunlun_triton.ops import decode_workspace

    with pytest.raises(ValueError, match="decode_workspace: q_heads .* kv_heads"):
        decode_workspace(2, q_heads, kv_heads, 16, 16, DEVICE)
