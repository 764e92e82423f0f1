"""Attention soft-capping (`logit_cap`, cap * tanh(s / cap) on the scores) stays
within tolerance for every finite cap, 1e-3 to 1e38, in decode and extend: the
issue-25 fuzz found uniform attention at 1e30 (tanh of a tiny s / cap was 0).
Oracle: the per-request torch reference (torch.tanh in float32)."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.ops import decode_attention, extend_attention
from kunlun_triton.ops.attention import reference
from kunlun_triton.testing import assert_close
from kunlun_triton.introspect.paged import decode_batch, extend_batch

CAPS = [1e-3, 1.0, 50.0, 1e5, 1e8, 1e30, 1e38]


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("cap", CAPS, ids=lambda c: f"cap{c:g}")
def test_decode_cap(cap, formulation):
    b = decode_batch([9, 21], q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float32, page_size=16, seed=5,
                     logit_cap=cap, device=DEVICE)
    b.q.mul_(4)  # scores of a few units, so the cap matters where it is small
    out = decode_attention(*b.args(), **b.kwargs(), num_kv_splits=2, formulation=formulation)
    expected = reference.decode_attention(*b.args(), **b.kwargs())
    assert_close(out, expected)
    if cap >= 1e30:  # the cap is the identity there: uncapped attention
        assert_close(out, reference.decode_attention(*b.args()))


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("cap", CAPS, ids=lambda c: f"cap{c:g}")
def test_extend_cap(cap, formulation):
    b = extend_batch([7, 16], [5, 3], q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float32, page_size=16, seed=9,
                     logit_cap=cap, device=DEVICE)
    b.q_extend.mul_(4)
    out = extend_attention(*b.args(), **b.kwargs(), formulation=formulation)
    assert_close(out, reference.extend_attention(*b.args(), **b.kwargs()))
