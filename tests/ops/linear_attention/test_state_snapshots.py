"""The state snapshots SGLang's extra_buffer prefix cache takes (a request's
states copied to a spare slot at its track points), written by our kernels
themselves: decode's new conv window and recurrent state also to
``track_slots[n]``, and the prefill's state after ``track_chunk_idx[n] *
track_chunk_size`` tokens to ``track_state[n]``. The oracles: the plain
recurrence in float64 (test_gated_delta_rule) and the window written out
here; slots nobody tracks stay as they were (NaN where never written)."""

import pytest
import torch
from hypothesis import given, strategies as st

from la_strategies import index_tensor, randn, start_locs
from strategies import DEVICE
from test_gated_delta_rule import _inputs, _recurrence

from kunlun_triton.ops import causal_conv1d_update, gated_delta_rule_decode, gated_delta_rule_prefill

CONFIGS = [pytest.param({"formulation": "dot", "CHUNK": 16, "BLOCK_V": 16}, id="dot"),
           pytest.param({"formulation": "sum", "CHUNK": 8, "BLOCK_V": 8}, id="sum")]  # fmt: skip


@given(tracked=st.lists(st.booleans(), min_size=3, max_size=3), seed=st.integers(0, 2**31 - 1))
def test_decode_writes_the_new_state_to_the_track_slot_too(tracked, seed):
    gen = torch.Generator().manual_seed(seed)
    inputs = _inputs(gen, 3, 2, 2, 16, 16, torch.float32)
    pool = randn(gen, 7, 4, 16, 16, scale=0.3)
    slots, spare = [2, 0, 5], [1, 3, 6]
    track = [s if t else -1 for s, t in zip(spare, tracked)]
    want_pool = pool.double().cpu().clone()
    for n, slot in enumerate(slots):
        _recurrence(*(t[n : n + 1] for t in inputs[:5]), *inputs[5:], want_pool[slot], 0.25)
        if track[n] >= 0:
            want_pool[track[n]] = want_pool[slot]
    gated_delta_rule_decode(*inputs, pool, index_tensor(slots), track_slots=index_tensor(track))
    torch.testing.assert_close(pool.double().cpu(), want_pool, atol=1e-5, rtol=1e-5)


@given(tracked=st.lists(st.booleans(), min_size=3, max_size=3), width=st.sampled_from([2, 3, 4]),
       seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_conv_update_writes_the_new_window_to_the_track_slot_too(tracked, width, seed):
    gen = torch.Generator().manual_seed(seed)
    x, weight = randn(gen, 3, 24), randn(gen, 24, width)
    states = randn(gen, 7, 24, width - 1)
    slots, spare = [4, 0, 2], [6, 1, 5]
    track = [s if t else -1 for s, t in zip(spare, tracked)]
    want = states.clone()
    for n, slot in enumerate(slots):
        window = torch.cat([states[slot], x[n, :, None]], dim=1)[:, 1:]  # rolled left, x appended
        for target in (slot, track[n]):
            if target >= 0:
                want[target] = window
    causal_conv1d_update(x, states, weight, None, index_tensor(slots), track_slots=index_tensor(track))
    torch.testing.assert_close(states, want, atol=0, rtol=0)


@pytest.mark.parametrize("config", CONFIGS)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=3), seed=st.integers(0, 2**31 - 1),
       data=st.data())  # fmt: skip
def test_prefill_snapshots_the_state_at_the_track_point(config, lengths, seed, data):
    """track_chunk_size 16 (a multiple of both configs' chunks): the point is
    0, 16 or 32 tokens in, or none; the output and the slots are unchanged by it."""
    gen = torch.Generator().manual_seed(seed)
    inputs = _inputs(gen, sum(lengths), 1, 2, 16, 16, torch.float32)
    pool = randn(gen, len(lengths) + 1, 2, 16, 16, scale=0.3)
    slots = list(range(1, len(lengths) + 1))
    chunks = [data.draw(st.integers(-1, (length - 1) // 16)) for length in lengths]
    track = torch.full((len(lengths), 2, 16, 16), float("nan"), device=DEVICE)
    want_pool, want_track, want, start = pool.double().cpu().clone(), track.double().cpu().clone(), [], 0
    for n, (length, slot) in enumerate(zip(lengths, slots)):
        cut = start + 16 * chunks[n] if chunks[n] >= 0 else start + length
        want.append(_recurrence(*(t[start:cut] for t in inputs[:5]), *inputs[5:], want_pool[slot], 0.25))
        if chunks[n] >= 0:
            want_track[n] = want_pool[slot]
        want.append(_recurrence(*(t[cut : start + length] for t in inputs[:5]), *inputs[5:], want_pool[slot], 0.25))
        start += length
    got = gated_delta_rule_prefill(*inputs, pool, index_tensor(slots), start_locs(lengths), track_state=track,
                                   track_chunk_idx=index_tensor(chunks), track_chunk_size=16, config=config)  # fmt: skip
    torch.testing.assert_close(got.double().cpu(), torch.cat(want), atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(pool.double().cpu(), want_pool, atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(track.double().cpu(), want_track, atol=2e-4, rtol=2e-4, equal_nan=True)


def _prefill_args(**change):
    gen = torch.Generator().manual_seed(0)
    args = dict(zip(("q", "k", "v", "a", "b", "A_log", "dt_bias"), _inputs(gen, 20, 1, 2, 16, 16, torch.float32)))
    args.update(state_pool=torch.zeros(3, 2, 16, 16, device=DEVICE), cache_indices=index_tensor([0, 2]),
                query_start_loc=start_locs([12, 8]), track_state=torch.zeros(2, 2, 16, 16, device=DEVICE),
                track_chunk_idx=index_tensor([1, -1]), track_chunk_size=8,
                config={"formulation": "sum", "CHUNK": 8, "BLOCK_V": 8})  # fmt: skip
    args.update(change)
    return args


@pytest.mark.parametrize("change, match", [
    (dict(track_chunk_idx=index_tensor([2, -1])), r"track_chunk_idx\[0\] = 2 puts the snapshot at token 16 of a 12"),
    (dict(track_chunk_idx=None), "track_state and track_chunk_idx go together"),
    (dict(track_state=torch.zeros(2, 2, 16, 8)), "track_state must be contiguous"),
    (dict(track_chunk_size=12, track_chunk_idx=index_tensor([0, -1])), "track_chunk_size 12 is not a multiple of the config's CHUNK 8"),
])  # fmt: skip
def test_bad_prefill_snapshots_are_refused_and_change_nothing(change, match):
    args = _prefill_args(**change)
    before = args["state_pool"].clone()
    with pytest.raises(ValueError, match=f"gated_delta_rule_prefill: {match}"):
        gated_delta_rule_prefill(**args)
    assert torch.equal(args["state_pool"], before)


@pytest.mark.parametrize("track, match", [([0, -1], "names a slot a request reads"), ([3, 3], "names a slot twice"),
                                          ([-1], "track_slots has 1 entries for 2")])  # fmt: skip
def test_bad_track_slots_are_refused_and_change_nothing(track, match):
    gen = torch.Generator().manual_seed(0)
    inputs = _inputs(gen, 2, 1, 2, 16, 16, torch.float32)
    pool = torch.zeros(5, 2, 16, 16, device=DEVICE)
    with pytest.raises(ValueError, match=f"gated_delta_rule_decode: .*{match}"):
        gated_delta_rule_decode(*inputs, pool, index_tensor([0, 1]), track_slots=index_tensor(track))
    assert not pool.any()
