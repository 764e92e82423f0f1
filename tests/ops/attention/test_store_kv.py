"""store_kv against plain index assignment."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.ops import store_kv
from kunlun_triton.runtime import FLOAT_DTYPES


@given(
    tokens=st.integers(1, 40),
    heads=st.sampled_from([1, 2, 8]),
    head_dim=st.sampled_from([13, 64, 128]),
    v_head_dim_delta=st.sampled_from([0, 0, 16]),
    dtype=st.sampled_from(FLOAT_DTYPES),
    strided=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_store_kv_matches_index_assignment(tokens, heads, head_dim, v_head_dim_delta, dtype, strided, seed):
    gen = torch.Generator().manual_seed(seed)
    slots = tokens + 7
    v_dim = head_dim + v_head_dim_delta
    k_buffer = torch.randn(slots, heads, head_dim, generator=gen).to(dtype).to(DEVICE)
    v_buffer = torch.randn(slots, heads, v_dim, generator=gen).to(dtype).to(DEVICE)
    loc = torch.randperm(slots, generator=gen)[:tokens].to(torch.int32).to(DEVICE)
    if strided:  # K and V as slices of one fused projection row
        fused = torch.randn(tokens, heads, head_dim + v_dim + 3, generator=gen).to(dtype).to(DEVICE)
        k, v = fused[:, :, :head_dim], fused[:, :, head_dim : head_dim + v_dim]
    else:
        k = torch.randn(tokens, heads, head_dim, generator=gen).to(dtype).to(DEVICE)
        v = torch.randn(tokens, heads, v_dim, generator=gen).to(dtype).to(DEVICE)
    # the oracle: plain index assignment
    want_k, want_v = k_buffer.clone(), v_buffer.clone()
    want_k[loc.long()], want_v[loc.long()] = k, v
    store_kv(k, v, k_buffer, v_buffer, loc)
    assert torch.equal(k_buffer, want_k)
    assert torch.equal(v_buffer, want_v)


def test_store_kv_rejects_out_of_range_slot():
    k = torch.zeros(2, 1, 8, device=DEVICE)
    buf = torch.zeros(4, 1, 8, device=DEVICE)
    with pytest.raises(ValueError, match="out_cache_loc.*slot id 4"):
        store_kv(k, k, buf, buf.clone(), torch.tensor([0, 4], device=DEVICE))


def test_store_kv_rejects_head_mismatch():
    with pytest.raises(ValueError, match="k's shape"):
        z = lambda *shape: torch.zeros(*shape, device=DEVICE)  # noqa: E731
        store_kv(z(2, 2, 8), z(2, 1, 8), z(4, 1, 8), z(4, 1, 8), torch.tensor([0, 1], device=DEVICE))
