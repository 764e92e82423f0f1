"""Attention sinks (gpt-oss: a learned logit per query head joins the softmax's
denominator, with no value) in decode and extend, against the torch reference
that writes the sink out as one more score column (`reference.attend`).

Hypothesis draws sink values from -inf-like (-1e4: the sink takes nothing)
to large (+20: the sink takes nearly everything, outputs ~1e-8), windows
shorter and longer than the context, split counts above what a request uses
(splits left empty, requests without keys), and every KV format served:
the compute dtype (fp32 / fp16 / bf16) and fp8 pools (e4m3fn, e5m2)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.ops import decode_attention, decode_workspace, extend_attention
from kunlun_triton.ops.attention import reference
from kunlun_triton.testing import assert_close

KV_FORMATS = ("auto", torch.float8_e4m3fn, torch.float8_e5m2)
SINK_LEVELS = (-1e4, -3.0, 0.0, 2.0, 20.0)


def draw_sinks(data, q_heads):
    """Per-head sinks around a drawn level (one head may sit far from the rest)."""
    level = data.draw(st.sampled_from(SINK_LEVELS), label="sink level")
    spread = data.draw(st.sampled_from([0.0, 1.0]), label="spread")
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="sink seed"))
    sinks = level + spread * torch.randn(q_heads, generator=gen)
    dtype = data.draw(st.sampled_from([torch.float32, torch.bfloat16]), label="sinks dtype")  # SGLang's: bf16
    return sinks.to(dtype).to(DEVICE)


def fp8_pool(pool, kv_format, k_scale=0.5, v_scale=2.0):
    """The pool's values as fp8 bytes of value / scale (torch's cast); the scales to read it with."""
    if kv_format == "auto":
        return {}
    pool.k_buffer = (pool.k_buffer.float().cpu() / k_scale).to(kv_format).to(DEVICE)
    pool.v_buffer = (pool.v_buffer.float().cpu() / v_scale).to(kv_format).to(DEVICE)
    return {"k_scale": k_scale, "v_scale": v_scale}


def windows(max_len):
    """None, or a window shorter or longer than the context (SGLang's sliding_window_size)."""
    return st.sampled_from([None, 1, 5, max_len // 2, 4 * max_len])


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@settings(max_examples=8)
@given(data=st.data(), lens=st.lists(st.integers(0, 70), min_size=1, max_size=3),
       heads=st.sampled_from([(2, 1), (2, 4), (1, 3)]), window=windows(70),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]), kv_format=st.sampled_from(KV_FORMATS),
       splits=st.sampled_from([None, 1, 3, 8]), seed=st.integers(0, 2**16))  # fmt: skip
def test_decode_sinks_match_reference(formulation, data, lens, heads, window, dtype, kv_format, splits, seed):
    kv_heads, group = heads
    b = decode_batch(lens, q_heads=kv_heads * group, kv_heads=kv_heads, head_dim=32, dtype=dtype, page_size=16,
                     seed=seed, sliding_window=window, device=DEVICE)  # fmt: skip
    scales = fp8_pool(b.pool, kv_format)
    sinks = draw_sinks(data, kv_heads * group)
    # 8 splits of >= 16 keys over at most 70: some splits of every request stay empty
    out = decode_attention(*b.args(), **b.kwargs(), num_kv_splits=splits, formulation=formulation, sinks=sinks,
                           **scales)  # fmt: skip
    expected = reference.decode_attention(*b.args(), **b.kwargs(), sinks=sinks, **scales)
    assert_close(out, expected, scale=2)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@settings(max_examples=8)
@given(data=st.data(), prefix=st.lists(st.integers(0, 40), min_size=1, max_size=3),
       extend=st.lists(st.integers(0, 24), min_size=3, max_size=3), heads=st.sampled_from([(2, 1), (2, 4), (1, 3)]),
       window=windows(64), dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       kv_format=st.sampled_from(KV_FORMATS), seed=st.integers(0, 2**16))  # fmt: skip
def test_extend_sinks_match_reference(formulation, data, prefix, extend, heads, window, dtype, kv_format, seed):
    """Radix prefix and new tokens, causal, with and without a window (the
    window crossing the cached prefix, or longer than the whole sequence)."""
    kv_heads, group = heads
    e = extend_batch(prefix, extend[: len(prefix)], q_heads=kv_heads * group, kv_heads=kv_heads, head_dim=32,
                     dtype=dtype, page_size=16, seed=seed, sliding_window=window, device=DEVICE)  # fmt: skip
    scales = fp8_pool(e.pool, kv_format)
    sinks = draw_sinks(data, kv_heads * group)
    out = extend_attention(*e.args(), **e.kwargs(), formulation=formulation, sinks=sinks, **scales)
    expected = reference.extend_attention(*e.args(), **e.kwargs(), sinks=sinks, **scales)
    assert_close(out, expected, scale=2)


def test_sink_math_in_float64():
    """The reference itself against the closed form in float64, one head:
    o = sum_j e^(s_j) v_j / (sum_j e^(s_j) + e^sink)."""
    b = decode_batch([11], q_heads=1, kv_heads=1, head_dim=16, dtype=torch.float32, seed=3, device="cpu")
    sinks = torch.tensor([1.25])
    slots = b.pool.kv_indices.long()
    s = (b.q[0, 0].double() @ b.pool.k_buffer[slots, 0].double().T) * b.sm_scale
    p = s.exp() / (s.exp().sum() + torch.tensor(1.25, dtype=torch.float64).exp())
    expected = p @ b.pool.v_buffer[slots, 0].double()
    got = reference.decode_attention(*b.args(), sinks=sinks)[0, 0]
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_decode_sinks_with_a_workspace_and_a_fixed_split_tile(formulation):
    """SGLang's backend path: the step's workspace (device-side split counts);
    and the batch-invariant split tiles: a 5-key request beside a 90-key one
    leaves most of its splits empty, and an empty request gets zeros."""
    b = decode_batch([5, 90, 0], q_heads=8, kv_heads=2, head_dim=64, dtype=torch.bfloat16, page_size=16, seed=7,
                     device=DEVICE)  # fmt: skip
    sinks = torch.linspace(-2.0, 6.0, 8, device=DEVICE)
    expected = reference.decode_attention(*b.args(), sinks=sinks)
    for kw in ({"workspace": decode_workspace(3, 8, 2, 64, 64, DEVICE, num_kv_splits=6)},
               {"split_tile_size": 16}):  # fmt: skip
        out = decode_attention(*b.args(), formulation=formulation, sinks=sinks, **kw)
        assert_close(out, expected, scale=2)
        assert torch.equal(out[2].float(), torch.zeros_like(out[2].float()))


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_extend_sinks_unified_and_chunked_agree(formulation):
    """Deterministic inference (unified_kv): one stream over the whole
    sequence, the sink folded once at the end, as in the two-stream kernel."""
    e = extend_batch([19], [13], q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float32, page_size=16, seed=2,
                     sliding_window=9, device=DEVICE)  # fmt: skip
    sinks = torch.tensor([0.5, -1.0, 3.0, 20.0], device=DEVICE)
    expected = reference.extend_attention(*e.args(), **e.kwargs(), sinks=sinks)
    two_streams = extend_attention(*e.args(), **e.kwargs(), formulation=formulation, sinks=sinks)
    assert_close(two_streams, expected)
    # unified: the new tokens written into slots after the pool's, kv_indices listing the whole sequence
    from kunlun_triton.ops import store_kv

    slots = e.pool.k_buffer.shape[0]
    k_buffer = torch.cat([e.pool.k_buffer, torch.zeros_like(e.pool.k_buffer[:13])])
    v_buffer = torch.cat([e.pool.v_buffer, torch.zeros_like(e.pool.v_buffer[:13])])
    new_slots = torch.arange(slots, slots + 13, device=DEVICE)
    store_kv(e.k_extend, e.v_extend, k_buffer, v_buffer, new_slots)
    whole = torch.cat([e.pool.kv_indices, new_slots.to(e.pool.kv_indices.dtype)])
    indptr = torch.tensor([0, whole.numel()], dtype=e.pool.kv_indptr.dtype, device=DEVICE)
    unified = extend_attention(e.q_extend, e.k_extend, e.v_extend, torch.empty_like(two_streams), k_buffer, v_buffer,
                               e.qo_indptr, indptr, whole, 13, e.sm_scale, sliding_window=9, unified_kv=True,
                               formulation=formulation, sinks=sinks)  # fmt: skip
    assert_close(unified, expected)


def test_sinks_are_checked_by_name():
    b = decode_batch([4], q_heads=4, kv_heads=2, head_dim=16, dtype=torch.float32, seed=1, device=DEVICE)
    e = extend_batch([3], [2], q_heads=4, kv_heads=2, head_dim=16, dtype=torch.float32, seed=1, device=DEVICE)
    args = b.args()
    args[3].fill_(7.0)
    for bad, error in ((torch.zeros(3, device=DEVICE), "sinks"), (torch.zeros(4, 1, device=DEVICE), "sinks"),
                       (torch.zeros(4, dtype=torch.int32, device=DEVICE), "sinks")):  # fmt: skip
        with pytest.raises((ValueError, TypeError), match=f"decode_attention: .*{error}"):
            decode_attention(*args, sinks=bad)
        with pytest.raises((ValueError, TypeError), match=f"extend_attention: .*{error}"):
            extend_attention(*e.args(), sinks=bad)
    assert bool((args[3] == 7.0).all())  # nothing written by a refused call


@pytest.mark.parametrize("key_major, prefetch", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_decode_slot_plans_match_reference(key_major, prefetch):
    """Stage 1's slot-id plans (K_KEY_MAJOR: K loaded as V is; PREFETCH_SLOTS:
    a whole tile's ids loaded one tile ahead, clamped to the last whole tile)
    on the split kernel: requests of several whole tiles and a ragged end,
    none, and fewer keys than a tile; with sinks and a window."""
    b = decode_batch([100, 0, 7, 64], q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float32, page_size=16, seed=4,
                     device=DEVICE)  # fmt: skip
    sinks = torch.tensor([0.0, 2.0, -1e4, 5.0], device=DEVICE)
    config = {"BLOCK_N": 16, "MAX_KV_SPLITS": 3, "MIN_SPLIT_TOKENS": 16, "K_KEY_MAJOR": key_major,
              "PREFETCH_SLOTS": prefetch, "BATCH_ROWS": 0, "DIRECT_SINGLE_SPLIT": 0}  # fmt: skip
    for window in (None, 40):
        out = decode_attention(*b.args(), sliding_window=window, sinks=sinks, config=config)
        assert_close(out, reference.decode_attention(*b.args(), sliding_window=window, sinks=sinks))
