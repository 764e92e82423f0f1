"""extend_attention against the per-request torch reference."""

import pytest
import torch
from hypothesis import given

from strategies import DEVICE, extend_cases

from kunlun_triton.introspect.paged import extend_batch
from kunlun_triton.ops import extend_attention
from kunlun_triton.ops.attention import reference as attention_reference
from kunlun_triton.testing import assert_close

FORMULATIONS = ("dot", "sum")


def reference(b):
    return attention_reference.extend_attention(*b.args(), **b.kwargs())


@pytest.mark.parametrize("formulation", FORMULATIONS)
@given(batch=extend_cases())
def test_extend_matches_reference(formulation, batch):
    out = extend_attention(*batch.args(), **batch.kwargs(), formulation=formulation)
    assert_close(out, reference(batch), scale=2, msg=f"prefix {batch.pool.lens} extend {batch.extend_lens}")


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 256, 13])
def test_extend_head_dims(formulation, head_dim):
    b = extend_batch([5, 0], [7, 20], q_heads=4, kv_heads=1, head_dim=head_dim, dtype=torch.bfloat16, page_size=16, seed=head_dim,
                     device=DEVICE)
    assert_close(extend_attention(*b.args(), formulation=formulation), reference(b))


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_extend_zero_length_extends_and_empty_prefixes(formulation):
    b = extend_batch([0, 6, 3, 0], [4, 0, 5, 0], q_heads=2, kv_heads=2, head_dim=16, dtype=torch.float32, seed=1, device=DEVICE)
    assert_close(extend_attention(*b.args(), formulation=formulation), reference(b))


def test_extend_nothing_to_do_leaves_output():
    b = extend_batch([3], [0], q_heads=2, kv_heads=1, head_dim=16, dtype=torch.float32, device=DEVICE)
    out = extend_attention(*b.args())
    assert out.shape == (0, 2, 16)
