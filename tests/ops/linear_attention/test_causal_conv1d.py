"""causal_conv1d (ragged prefill from and to the conv state pool) and
causal_conv1d_update (one decode token) against a float64 oracle written
here: the convolution of each request's inputs with its initial state
prepended, and the state its last inputs leave."""

import pytest
import torch
from hypothesis import given, strategies as st

from la_strategies import index_tensor, ragged_batches, randn, start_locs
from strategies import DEVICE

from kunlun_triton.ops import causal_conv1d, causal_conv1d_update


def _oracle(x, weight, bias, states, lengths, slots, has_init, silu):
    """Per request: y_t = sum_j w[:, j] x_{t-(W-1)+j} (+ bias), SiLU; new states."""
    width = weight.shape[1]
    out, states = [], states.double().clone()
    w, start = weight.double(), 0
    for length, slot, init in zip(lengths, slots, has_init):
        prev = states[slot].T if (slot >= 0 and init) else torch.zeros(width - 1, x.shape[1], dtype=torch.float64)
        seq = torch.cat([prev, x[start : start + length].double()])
        for t in range(length):
            y = (seq[t : t + width] * w.T).sum(0) + (0 if bias is None else bias.double())
            out.append(y * torch.sigmoid(y) if silu else y)
        if slot >= 0:
            states[slot] = seq[-(width - 1) :].T
        start += length
    return torch.stack(out), states


@given(batch=ragged_batches(max_len=12), width=st.sampled_from([2, 3, 4]), dim=st.sampled_from([5, 16, 40]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), bias=st.booleans(), silu=st.booleans(),
       flags=st.booleans(), transposed_pool=st.booleans(), seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_causal_conv1d_matches_the_oracle(batch, width, dim, dtype, bias, silu, flags, transposed_pool, seed):
    lengths, slots, has_init, pool = batch
    gen = torch.Generator().manual_seed(seed)
    x = randn(gen, sum(lengths), dim, dtype=dtype)
    weight = randn(gen, dim, width, dtype=dtype)
    b = randn(gen, dim, dtype=dtype) if bias else None
    if transposed_pool:  # SGLang's pools may keep channels innermost
        states = randn(gen, pool, width - 1, dim, dtype=dtype).transpose(1, 2)
    else:
        states = randn(gen, pool, dim, width - 1, dtype=dtype)
    init = has_init if flags else [True] * len(lengths)
    want, want_states = _oracle(x.cpu(), weight.cpu(), b.cpu() if bias else None, states.cpu(), lengths, slots,
                                init, silu)  # fmt: skip
    got = causal_conv1d(x, weight, b, states, start_locs(lengths), index_tensor(slots),
                        index_tensor(has_init, torch.bool) if flags else None, "silu" if silu else None)  # fmt: skip
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.double().cpu(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(states.double().cpu(), want_states.to(dtype).double(), atol=0, rtol=0)


def test_long_requests_cross_token_blocks():
    """Several token blocks per request (BLOCK_T 4): later blocks take their window from x."""
    gen = torch.Generator().manual_seed(0)
    lengths, slots = [11, 2, 9], [2, 0, 1]
    x, weight, bias = randn(gen, 22, 24), randn(gen, 24, 4), randn(gen, 24)
    states = randn(gen, 3, 24, 3)
    want, want_states = _oracle(x, weight, bias, states, lengths, slots, [True, True, False], True)
    got = causal_conv1d(x, weight, bias, states, start_locs(lengths), index_tensor(slots),
                        index_tensor([1, 1, 0], torch.bool), config={"BLOCK_T": 4, "BLOCK_D": 16})  # fmt: skip
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states.double(), want_states.float().double())


@given(batch=ragged_batches(max_len=1), width=st.sampled_from([2, 3, 4]), bias=st.booleans(),
       seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_update_matches_the_oracle(batch, width, bias, seed):
    _, slots, _, pool = batch
    gen = torch.Generator().manual_seed(seed)
    n, dim = len(slots), 20
    x, weight = randn(gen, n, dim), randn(gen, dim, width)
    b = randn(gen, dim) if bias else None
    states = randn(gen, pool, dim, width - 1)
    want, want_states = _oracle(x, weight, b, states, [1] * n, slots, [True] * n, True)
    got = causal_conv1d_update(x, states, weight, b, index_tensor(slots))
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states.double(), want_states.float().double())


def test_prefill_then_updates_is_one_convolution():
    """A request prefilled in two pieces, then decoded token by token, gives
    the convolution of the whole sequence at once."""
    gen = torch.Generator().manual_seed(3)
    dim, total = 12, 9
    x, weight, bias = randn(gen, total, dim), randn(gen, dim, 4), randn(gen, dim)
    whole_states = torch.zeros(1, dim, 3, device=DEVICE)
    whole = causal_conv1d(x, weight, bias, whole_states, start_locs([total]), index_tensor([0]))
    states = torch.zeros(1, dim, 3, device=DEVICE)
    parts = [causal_conv1d(x[:2], weight, bias, states, start_locs([2]), index_tensor([0])),
             causal_conv1d(x[2:6], weight, bias, states, start_locs([4]), index_tensor([0]),
                           index_tensor([True], torch.bool))]  # fmt: skip
    parts += [causal_conv1d_update(x[t : t + 1], states, weight, bias, index_tensor([0])) for t in range(6, total)]
    torch.testing.assert_close(torch.cat(parts), whole, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(states, whole_states)


@pytest.mark.parametrize("case, match", [
    (dict(weight=torch.zeros(8, 5)), "width must be 2..4"),
    (dict(slots=[0, 0]), "names a slot twice"),
    (dict(slots=[0, 7]), "outside the pool"),
    (dict(activation="gelu"), "activation"),
    (dict(starts=[0, 3, 2]), "non-decreasing"),
    (dict(states=torch.zeros(4, 8, 2)), r"conv_states must be \[slots, 8, 3\]"),
])  # fmt: skip
def test_bad_inputs_are_refused_and_change_nothing(case, match):
    x = torch.randn(5, 8, device=DEVICE)
    weight = case.get("weight", torch.randn(8, 4)).to(DEVICE)
    states = case.get("states", torch.randn(4, 8, 3)).to(DEVICE)
    before = states.clone()
    starts = torch.tensor(case.get("starts", [0, 3, 5]), dtype=torch.int32, device=DEVICE)
    with pytest.raises((ValueError, TypeError), match=match):
        causal_conv1d(x, weight, None, states, starts, index_tensor(case.get("slots", [0, 1])),
                      activation=case.get("activation", "silu"))  # fmt: skip
    assert torch.equal(states, before)
    with pytest.raises(ValueError, match="causal_conv1d_update: cache_indices has 2 entries for 5 requests"):
        causal_conv1d_update(x, torch.zeros(4, 8, 3, device=DEVICE), torch.randn(8, 4, device=DEVICE), None,
                             index_tensor([0, 1]))
