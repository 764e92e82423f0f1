"""decode_attention against the per-request torch reference."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import DEVICE, decode_cases

from kunlun_triton.ops import decode_attention
from kunlun_triton.ops.attention import reference as attention_reference
from kunlun_triton.testing import assert_close
from kunlun_triton.testing.paged import decode_batch

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
