"""Non-finite keys and values, and extreme scales, in the kernels and in the
torch reference, against a float64 oracle that only ever reads the keys a
query can see.

- A key a query cannot see (the causal future of an extend, outside a
  sliding window) takes no part in its output, whatever its K or V holds
  (inf, -inf, NaN): 0 * inf would otherwise turn the output into NaN.
- A NaN the query can see stays visible: that query's output is NaN.
- The running max starts at -inf: with a huge sm_scale every score may lie
  below any finite start value, and the single-key case returns V exactly.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.ops import decode_attention, extend_attention
from kunlun_triton.ops.attention import reference
from kunlun_triton.testing import assert_close

FORMULATIONS = ("dot", "sum")
BAD = (float("inf"), float("-inf"), float("nan"))


def oracle_row(q, k, v, sm_scale):
    """float64 attention of one query q [H, D] over its visible keys only: k [n, Hkv, D], v [n, Hkv, Dv]."""
    group = q.shape[0] // k.shape[1]
    kf = k.double().repeat_interleave(group, 1)
    vf = v.double().repeat_interleave(group, 1)
    s = torch.einsum("hd,nhd->hn", q.double(), kf) * sm_scale
    return torch.einsum("hn,nhd->hd", torch.softmax(s, -1), vf)


def extend_oracle(b):
    """Row by row, slicing out exactly the keys each row sees."""
    out = torch.zeros(b.q_extend.shape[0], b.q_extend.shape[1], b.v_extend.shape[2], dtype=torch.float64)
    window = b.sliding_window if b.sliding_window and b.sliding_window > 0 else None
    for i, e in enumerate(b.extend_lens):
        q0 = int(b.qo_indptr[i])
        slots = b.pool.slots(i).long()
        k = torch.cat([b.pool.k_buffer[slots], b.k_extend[q0 : q0 + e]]).cpu()
        v = torch.cat([b.pool.v_buffer[slots], b.v_extend[q0 : q0 + e]]).cpu()
        prefix = slots.numel()
        for m in range(e):
            pos = prefix + m
            lo = max(pos - window, 0) if window else 0
            out[q0 + m] = oracle_row(b.q_extend[q0 + m].cpu(), k[lo : pos + 1], v[lo : pos + 1], b.sm_scale)
    return out


@pytest.mark.parametrize("formulation", FORMULATIONS)
@settings(max_examples=6)
@given(
    bad=st.sampled_from(BAD),
    where=st.sampled_from(["k", "v"]),
    row=st.integers(1, 20),
    window=st.sampled_from([None, 3]),
    seed=st.integers(0, 2**16),
)
def test_hidden_keys_never_reach_a_query(formulation, bad, where, row, window, seed):
    """A bad value in new token `row`'s K or V (the causal future of every
    earlier row; outside the window of every row far enough ahead, when the
    prefix is long) leaves every row that cannot see it exact."""
    b = extend_batch([9], [21], q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float32, page_size=4, seed=seed,
                     sliding_window=window, device=DEVICE)  # fmt: skip
    (b.k_extend if where == "k" else b.v_extend)[row, 1, 5] = bad
    if window:  # and a bad prefix key, outside every new token's window
        (b.pool.k_buffer if where == "k" else b.pool.v_buffer)[b.pool.slots(0)[0].long(), 0, 3] = bad
    expected = extend_oracle(b)
    blind = list(range(row))  # the rows before `row` cannot see it
    for out in (extend_attention(*b.args(), **b.kwargs(), formulation=formulation),
                reference.extend_attention(*b.args(), **b.kwargs())):  # fmt: skip
        assert torch.isfinite(out[blind]).all(), f"row {row}: hidden {bad} in {where} leaked"
        assert_close(out[blind], expected[blind].float(), scale=2)
    if window:
        far = [m for m in range(21) if m > row + window]  # past the window of the bad new token too
        out = extend_attention(*b.args(), **b.kwargs(), formulation=formulation)
        assert torch.isfinite(out[far]).all()
        assert_close(out[far], expected[far].float(), scale=2)


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("where", ["k", "v"])
def test_a_visible_nan_stays_nan(formulation, where):
    b = extend_batch([6], [12], q_heads=2, kv_heads=1, head_dim=16, dtype=torch.float16, seed=3, device=DEVICE)
    row = 7
    (b.k_extend if where == "k" else b.v_extend)[row, 0, 2] = float("nan")
    for out in (extend_attention(*b.args(), formulation=formulation), reference.extend_attention(*b.args())):
        assert torch.isnan(out[row:]).any(dim=-1).all(), "a row that sees the NaN must show it"
        assert torch.isfinite(out[:row]).all(), "rows that cannot see it must not"

    d = decode_batch([5, 40], q_heads=2, kv_heads=1, head_dim=16, dtype=torch.float16, seed=4, device=DEVICE)
    (d.pool.k_buffer if where == "k" else d.pool.v_buffer)[d.pool.slots(1)[17].long(), 0, 2] = float("nan")
    for out in (decode_attention(*d.args(), num_kv_splits=3, formulation=formulation),
                reference.decode_attention(*d.args())):  # fmt: skip
        assert torch.isnan(out[1]).any(dim=-1).all()
        assert torch.isfinite(out[0]).all()


@pytest.mark.parametrize("formulation", FORMULATIONS)
def test_decode_ignores_bad_keys_outside_the_window(formulation):
    d = decode_batch([30], q_heads=4, kv_heads=2, head_dim=16, dtype=torch.float32, seed=9, sliding_window=7,
                     device=DEVICE)  # fmt: skip
    slots = d.pool.slots(0).long()
    d.pool.k_buffer[slots[:20], 0, 1] = float("nan")
    d.pool.v_buffer[slots[:22], 1, 0] = float("inf")
    expected = oracle_row(d.q[0].cpu(), d.pool.k_buffer[slots[-8:]].cpu(), d.pool.v_buffer[slots[-8:]].cpu(), d.sm_scale)
    for out in (decode_attention(*d.args(), **d.kwargs(), num_kv_splits=2, formulation=formulation),
                reference.decode_attention(*d.args(), **d.kwargs())):  # fmt: skip
        assert_close(out[0], expected.float())


@pytest.mark.parametrize("formulation", FORMULATIONS)
@settings(max_examples=4)
@given(log_scale=st.floats(33, 37), seed=st.integers(0, 2**16))
def test_huge_scales_reach_the_true_maximum(formulation, log_scale, seed):
    """sm_scale = 10**33 .. 10**37: request 0's only score is far below
    -1e30 (a finite running-max start would swallow it), request 1's
    softmax becomes a one-hot on its best key; one key alone gives back its
    V exactly."""
    sm_scale = 10.0**log_scale
    d = decode_batch([1, 6], q_heads=2, kv_heads=1, head_dim=8, dtype=torch.float32, seed=seed, device=DEVICE)
    slots = [d.pool.slots(i).long() for i in range(2)]
    d.q.copy_(d.q.sign() * 0.001)  # |s| stays finite: 8 * 0.001 * 4 * 1e37 < 3.4e38
    d.q[0] = -0.001 * d.pool.k_buffer[slots[0][0], 0].sign()  # s = -0.001 * sum|k| * scale <= -1e30
    args = lambda: (*d.args()[:6], sm_scale)  # noqa: E731 (a fresh output per call)
    for out in (decode_attention(*args(), formulation=formulation), reference.decode_attention(*args())):
        assert torch.equal(out[0], d.pool.v_buffer[slots[0][0]].expand(2, -1)), "one key: V exactly"
        scores = torch.einsum("hd,nd->hn", d.q[1].double(), d.pool.k_buffer[slots[1], 0].double())
        best = d.pool.v_buffer[slots[1][scores.argmax(-1)], 0]
        assert_close(out[1], best)

    e = extend_batch([0], [1], q_heads=2, kv_heads=2, head_dim=8, dtype=torch.float16, seed=seed, device=DEVICE)
    args = lambda: (*e.args()[:10], sm_scale)  # noqa: E731
    for out in (extend_attention(*args(), formulation=formulation), reference.extend_attention(*args())):
        assert torch.equal(out[0], e.v_extend[0]), "the first new token sees only itself"


def test_nothing_visible_gives_zeros_not_nan():
    d = decode_batch([0, 3], q_heads=2, kv_heads=1, head_dim=8, dtype=torch.float32, device=DEVICE)
    for out in (decode_attention(*d.args()), reference.decode_attention(*d.args())):
        assert torch.equal(out[0], torch.zeros_like(out[0]))
        assert math.isfinite(float(out[1].abs().sum()))
