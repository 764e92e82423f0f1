"""Properties users depend on, each checked against an independent answer."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.introspect.paged import build_pool, decode_batch, extend_batch
from kunlun_triton.ops import decode_attention, extend_attention, store_kv
from kunlun_triton.testing import assert_close

FORMULATIONS = ("dot", "sum")


def _sequence(n, q_heads, kv_heads, head_dim, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    rand = lambda h: torch.randn(n, h, head_dim, generator=gen).to(dtype).to(DEVICE)  # noqa: E731
    return rand(q_heads), rand(kv_heads), rand(kv_heads)


@pytest.mark.parametrize("formulation", FORMULATIONS)
@settings(max_examples=4)
@given(
    n=st.integers(2, 40),
    cuts=st.lists(st.integers(1, 39), max_size=3),
    page_size=st.sampled_from([1, 16]),
    seed=st.integers(0, 2**31 - 1),
)
def test_chunked_extend_equals_full_prefill(formulation, n, cuts, page_size, seed):
    """Prefill in chunks (each chunk's predecessors stored to scrambled pool
    slots by store_kv first) gives the rows of one full prefill."""
    q, k, v = _sequence(n, 4, 2, 32, torch.float32, seed)
    zero = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    full = torch.empty(n, 4, 32, device=DEVICE)
    pool = build_pool([n], kv_heads=2, head_dim=32, page_size=page_size, dtype=torch.float32, seed=seed, device=DEVICE)
    extend_attention(q, k, v, full, pool.k_buffer, pool.v_buffer, torch.tensor([0, n], dtype=torch.int32, device=DEVICE),
                     zero, pool.kv_indices[:0], n, 32**-0.5, formulation=formulation)

    slots = pool.kv_indices
    bounds = sorted({0, n, *[c for c in cuts if c < n]})
    chunked = torch.empty_like(full)
    for lo, hi in zip(bounds, bounds[1:]):
        store_kv(k[lo:hi], v[lo:hi], pool.k_buffer, pool.v_buffer, slots[lo:hi])
        extend_attention(q[lo:hi], k[lo:hi], v[lo:hi], chunked[lo:hi], pool.k_buffer, pool.v_buffer,
                         torch.tensor([0, hi - lo], dtype=torch.int32, device=DEVICE), torch.tensor([0, lo], dtype=torch.int32, device=DEVICE),
                         slots[:lo], hi - lo, 32**-0.5, formulation=formulation)
    assert_close(chunked, full, scale=4)


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_shared_prefix_slots_equal_private_copies(formulation):
    """A radix hit (requests listing the same prefix slots) gives the answer
    of each request owning a private copy of those K/V values."""
    lens = [40, 35, 50]
    shared = build_pool(lens, kv_heads=2, head_dim=64, page_size=16, dtype=torch.float16, seed=7, shared_prefix_pages=2, device=DEVICE)
    assert shared.shared_tokens == 32
    private = build_pool(lens, kv_heads=2, head_dim=64, page_size=16, dtype=torch.float16, seed=8, device=DEVICE)
    for b in range(len(lens)):  # copy each request's values into its own private slots
        private.k_buffer[private.slots(b).long()] = shared.k_buffer[shared.slots(b).long()]
        private.v_buffer[private.slots(b).long()] = shared.v_buffer[shared.slots(b).long()]
    assert torch.equal(shared.slots(1)[:32], shared.slots(0)[:32])
    q = torch.randn(3, 8, 64, device=DEVICE).half()
    outs = []
    for pool in (shared, private):
        o = torch.empty(3, 8, 64, dtype=torch.float16, device=DEVICE)
        decode_attention(q, pool.k_buffer, pool.v_buffer, o, pool.kv_indptr, pool.kv_indices, 0.125,
                         num_kv_splits=2, formulation=formulation)
        outs.append(o)
    assert_close(outs[0], outs[1], atol=0, rtol=0)


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("window", [None, 5])
def test_decode_of_token_t_equals_last_extend_row(formulation, window):
    """Decoding token t over the pool (t's own K/V stored first) equals the
    last row of an extend whose new tokens end at t."""
    b = extend_batch([13, 0, 30], [6, 1, 9], q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float16, page_size=16,
                     seed=11, sliding_window=window, logit_cap=10.0, device=DEVICE)
    ext = extend_attention(*b.args(), **b.kwargs(), formulation=formulation)
    p = b.pool
    spare = torch.arange(p.k_buffer.shape[0], p.k_buffer.shape[0] + len(b.q_extend), dtype=torch.int32, device=DEVICE)
    k_buffer = torch.cat([p.k_buffer, torch.zeros(len(spare), *p.k_buffer.shape[1:], dtype=p.k_buffer.dtype, device=DEVICE)])
    v_buffer = torch.cat([p.v_buffer, torch.zeros(len(spare), *p.v_buffer.shape[1:], dtype=p.v_buffer.dtype, device=DEVICE)])
    store_kv(b.k_extend, b.v_extend, k_buffer, v_buffer, spare)
    indices, lens, last_rows = [], [], []
    for i in range(len(b.extend_lens)):
        q0, q1 = int(b.qo_indptr[i]), int(b.qo_indptr[i + 1])
        indices.append(torch.cat([p.slots(i), spare[q0:q1]]))
        lens.append(len(indices[-1]))
        last_rows.append(q1 - 1)
    indptr = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    o = torch.empty(len(lens), 4, 32, dtype=torch.float16, device=DEVICE)
    decode_attention(b.q_extend[last_rows], k_buffer, v_buffer, o, indptr, torch.cat(indices), b.sm_scale,
                     **b.kwargs(), num_kv_splits=3, formulation=formulation)
    assert_close(o, ext[last_rows])


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_results_do_not_depend_on_request_order(formulation):
    lens = [17, 0, 40, 3]
    batch = decode_batch(lens, q_heads=3, kv_heads=1, head_dim=16, dtype=torch.float32, page_size=16, seed=2, device=DEVICE)
    out = decode_attention(*batch.args(), num_kv_splits=2, formulation=formulation)
    order = [2, 0, 3, 1]
    p = batch.pool
    indices = torch.cat([p.slots(i) for i in order])
    indptr = torch.tensor([0, *torch.tensor([lens[i] for i in order]).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    o = torch.empty_like(out)
    decode_attention(batch.q[order], p.k_buffer, p.v_buffer, o, indptr, indices, batch.sm_scale,
                     num_kv_splits=2, formulation=formulation)
    assert_close(o, out[order], atol=0, rtol=0)

    b = extend_batch([4, 9], [5, 2], q_heads=2, kv_heads=2, head_dim=16, dtype=torch.float32, seed=4, device=DEVICE)
    ext = extend_attention(*b.args(), formulation=formulation)
    swap_q = torch.cat([b.q_extend[5:], b.q_extend[:5]])
    swap_k = torch.cat([b.k_extend[5:], b.k_extend[:5]])
    swap_v = torch.cat([b.v_extend[5:], b.v_extend[:5]])
    kv_indices = torch.cat([b.pool.slots(1), b.pool.slots(0)])
    o = torch.empty_like(ext)
    extend_attention(swap_q, swap_k, swap_v, o, b.pool.k_buffer, b.pool.v_buffer, torch.tensor([0, 2, 7], dtype=torch.int32, device=DEVICE),
                     torch.tensor([0, 9, 13], dtype=torch.int32, device=DEVICE), kv_indices, 5, b.sm_scale, formulation=formulation)
    assert_close(o, torch.cat([ext[5:], ext[:5]]), atol=0, rtol=0)
