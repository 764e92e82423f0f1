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


FP8_DTYPES = [torch.float8_e4m3fn, torch.float8_e5m2]


@given(
    tokens=st.integers(1, 24),
    heads=st.sampled_from([1, 2]),
    head_dim=st.sampled_from([13, 64]),
    dtype=st.sampled_from(FLOAT_DTYPES),
    pool_dtype=st.sampled_from(FP8_DTYPES),
    k_scale=st.sampled_from([None, 1.0, 0.01, 3.7]),
    v_scale=st.sampled_from([None, 1.0, 0.5, 250.0]),
    spread=st.sampled_from([1.0, 1e-4, 300.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_store_kv_fp8_pool_equals_torch_cast(tokens, heads, head_dim, dtype, pool_dtype, k_scale, v_scale, spread,
                                             seed):  # fmt: skip
    """An fp8 pool's bytes are torch's cast of the fp32 x / scale, bit for bit
    (overflowing, subnormal, NaN and inf inputs included)."""
    gen = torch.Generator().manual_seed(seed)
    slots = tokens + 5
    k = (torch.randn(tokens, heads, head_dim, generator=gen) * spread).to(dtype)
    v = (torch.randn(tokens, heads, head_dim, generator=gen) * spread).to(dtype)
    k.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -0.0]).to(dtype)
    k_buffer = torch.randint(0, 256, (slots, heads, head_dim), generator=gen, dtype=torch.uint8).view(pool_dtype)
    v_buffer = torch.randint(0, 256, (slots, heads, head_dim), generator=gen, dtype=torch.uint8).view(pool_dtype)
    loc = torch.randperm(slots, generator=gen)[:tokens]
    want_k, want_v = k_buffer.view(torch.uint8).clone(), v_buffer.view(torch.uint8).clone()
    want_k[loc] = (k.float() / (k_scale or 1.0)).to(pool_dtype).view(torch.uint8)
    want_v[loc] = (v.float() / (v_scale or 1.0)).to(pool_dtype).view(torch.uint8)
    k_buffer, v_buffer = k_buffer.to(DEVICE), v_buffer.to(DEVICE)
    store_kv(k.to(DEVICE), v.to(DEVICE), k_buffer, v_buffer, loc.to(DEVICE), k_scale=k_scale, v_scale=v_scale)
    assert torch.equal(k_buffer.view(torch.uint8).cpu(), want_k)
    assert torch.equal(v_buffer.view(torch.uint8).cpu(), want_v)


def test_store_kv_fp8_bad_input_changes_nothing():
    z = lambda *shape, dtype=torch.float32: torch.zeros(*shape, device=DEVICE).to(dtype)  # noqa: E731
    k, loc = z(2, 1, 8), torch.tensor([0, 1], device=DEVICE)
    pool = z(4, 1, 8, dtype=torch.float8_e4m3fn)
    before = pool.view(torch.uint8).clone()
    with pytest.raises(ValueError, match="store_kv: k_scale must be > 0"):
        store_kv(k + 1, k + 1, pool, pool.clone(), loc, k_scale=0.0)
    with pytest.raises(ValueError, match="store_kv: v_scale must be finite"):
        store_kv(k + 1, k + 1, pool, pool.clone(), loc, v_scale=float("nan"))
    with pytest.raises(TypeError, match="store_kv: k_buffer .* and v_buffer .* must both be fp8"):
        store_kv(k + 1, k + 1, pool, z(4, 1, 8, dtype=torch.float8_e5m2), loc)
    with pytest.raises(TypeError, match="store_kv: k_buffer"):
        store_kv(k + 1, k + 1, z(4, 1, 8, dtype=torch.uint8), z(4, 1, 8, dtype=torch.uint8), loc)
    with pytest.raises(ValueError, match="store_kv: k_scale=2.0 applies to an fp8 KV pool only"):
        store_kv(k + 1, k + 1, z(4, 1, 8), z(4, 1, 8), loc, k_scale=2.0)
    assert torch.equal(pool.view(torch.uint8), before)
