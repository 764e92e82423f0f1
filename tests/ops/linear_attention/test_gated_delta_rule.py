"""gated_delta_rule_decode and gated_delta_rule_prefill against the plain
recurrence in float64, written here (gates, L2 norms, decay, delta update,
output per token): ragged batches, lengths across chunk boundaries, initial
states present or not, value heads a multiple of key heads, both
formulations; prefill cut anywhere then decode is one recurrence."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, strategies as st

from la_strategies import index_tensor, ragged_batches, randn, start_locs
from strategies import DEVICE

from kunlun_triton.ops import gated_delta_rule_decode, gated_delta_rule_prefill
from kunlun_triton.ops.linear_attention import gdn
from kunlun_triton.runtime import capabilities


def _recurrence(q, k, v, a, b, A_log, dt_bias, state, scale):
    """One request, float64: state [HV, V, K] (the pool's layout) is updated."""
    q, k, v, a, b = (t.double().cpu() for t in (q, k, v, a, b))
    group = v.shape[1] // k.shape[1]
    x = a + dt_bias.double().cpu()
    g = -torch.exp(A_log.double().cpu()) * torch.where(x <= 20, F.softplus(x), x)
    beta = torch.sigmoid(b)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    out = torch.zeros(v.shape, dtype=torch.float64)
    for t in range(q.shape[0]):
        for h in range(v.shape[1]):
            s = state[h].T * torch.exp(g[t, h])  # [K, V]
            kt = k[t, h // group]
            s = s + torch.outer(kt, beta[t, h] * (v[t, h] - s.T @ kt))
            state[h] = s.T
            out[t, h] = scale * (s.T @ q[t, h // group])
    return out


def _inputs(gen, tokens, heads, group, key_dim, value_dim, dtype):
    vh = heads * group
    return (randn(gen, tokens, heads, key_dim, dtype=dtype), randn(gen, tokens, heads, key_dim, dtype=dtype),
            randn(gen, tokens, vh, value_dim, dtype=dtype), randn(gen, tokens, vh, dtype=dtype),
            randn(gen, tokens, vh, dtype=dtype), (torch.rand(vh, generator=gen) * 2 - 1).to(DEVICE),
            randn(gen, vh))  # fmt: skip


def _tolerance(dtype):
    return dict(atol=2e-4, rtol=2e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)


# prefill's final state with its k / |k| and T diag(beta) in bf16 (bf16 inputs where the dots take
# bf16: sm_90, gfx942; not the interpreter): the state pass's products are bf16 dots, as FLA's chain
# (w h, A (beta v), k^T v_new on bf16 h and v_new). An emulation of that rounding (float64 math,
# bf16 / tf32 where the GPU rounds) at these dims, 400 draws, CHUNK 16, measured state errors up to
# 8.0e-3 (5.1e-3 of 1 + |S|; FLA's chain: 1.0e-2 / 6.8e-3); fp32 workspace: 2e-4 holds
BF16_WORKSPACE_STATE = dict(atol=1e-2, rtol=1e-2)


def _pool_tolerance(dtype, config):
    if dtype == torch.bfloat16 and config.get("formulation", "dot") == "dot" and capabilities().dot_bf16:
        return BF16_WORKSPACE_STATE
    return dict(atol=2e-4, rtol=2e-4)


@given(batch=ragged_batches(max_len=1), heads=st.sampled_from([1, 2]), group=st.sampled_from([1, 2, 3]),
       dims=st.sampled_from([(16, 16), (16, 32), (32, 16), (20, 12)]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_decode_matches_the_recurrence(batch, heads, group, dims, dtype, seed):
    _, slots, _, pool_size = batch
    gen = torch.Generator().manual_seed(seed)
    n, (key_dim, value_dim) = len(slots), dims
    inputs = _inputs(gen, n, heads, group, key_dim, value_dim, dtype)
    pool = randn(gen, pool_size, heads * group, value_dim, key_dim, scale=0.3)
    want_pool = pool.double().cpu().clone()
    want = []
    for i, slot in enumerate(slots):
        state = want_pool[slot] if slot >= 0 else torch.zeros(heads * group, value_dim, key_dim, dtype=torch.float64)
        want.append(_recurrence(*(t[i : i + 1] for t in inputs[:5]), *inputs[5:], state, key_dim**-0.5))
    got = gated_delta_rule_decode(*inputs, pool, index_tensor(slots))
    torch.testing.assert_close(got.double().cpu(), torch.cat(want), **_tolerance(dtype))
    torch.testing.assert_close(pool.double().cpu(), want_pool, atol=1e-5, rtol=1e-5)


FORMULATIONS = [pytest.param({"formulation": "dot", "CHUNK": 16, "BLOCK_V": 16}, id="dot"),
                pytest.param({"formulation": "sum", "CHUNK": 8, "BLOCK_V": 8}, id="sum")]  # fmt: skip


@pytest.mark.parametrize("config", FORMULATIONS)
@given(batch=ragged_batches(max_len=40), heads=st.sampled_from([1, 2]), group=st.sampled_from([1, 2]),
       dims=st.sampled_from([(16, 16), (16, 32), (20, 12)]), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       flags=st.booleans(), seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_prefill_matches_the_recurrence(config, batch, heads, group, dims, dtype, flags, seed):
    lengths, slots, has_init, pool_size = batch
    gen = torch.Generator().manual_seed(seed)
    key_dim, value_dim = dims
    inputs = _inputs(gen, sum(lengths), heads, group, key_dim, value_dim, dtype)
    pool = randn(gen, pool_size, heads * group, value_dim, key_dim, scale=0.3)
    want_pool = pool.double().cpu().clone()
    init = has_init if flags else [True] * len(lengths)
    want, start = [], 0
    for length, slot, use in zip(lengths, slots, init):
        zero = torch.zeros(heads * group, value_dim, key_dim, dtype=torch.float64)
        state = want_pool[slot] if slot >= 0 else zero
        if slot >= 0 and not use:
            state.zero_()
        rows = slice(start, start + length)
        want.append(_recurrence(*(t[rows] for t in inputs[:5]), *inputs[5:], state, key_dim**-0.5))
        start += length
    got = gated_delta_rule_prefill(*inputs, pool, index_tensor(slots), start_locs(lengths),
                                   index_tensor(has_init, torch.bool) if flags else None, config=config)  # fmt: skip
    torch.testing.assert_close(got.double().cpu(), torch.cat(want), **_tolerance(dtype))
    torch.testing.assert_close(pool.double().cpu(), want_pool, **_pool_tolerance(dtype, config))


def test_prefill_bf16_workspace(monkeypatch):
    """k / |k| and T diag(beta) stored in bf16 as a target with bf16 dots plans them (the interpreter's
    bf16 dot being wrong, its state pass widens them for fp32 products): the stored rounding moves the
    state (interpreter: 1.9e-3 off, against 9e-8 with the fp32 workspace), within the bf16 workspace's
    bound; the fp32 workspace is held to 2e-4 (where the dots take bf16, its tf32 to the bf16 bound)."""
    gen = torch.Generator().manual_seed(5)
    lengths = [37, 9]
    inputs = _inputs(gen, sum(lengths), 2, 2, 16, 32, torch.bfloat16)
    pool0 = randn(gen, 3, 4, 32, 16, scale=0.3)
    want_pool = pool0.double().cpu().clone()
    want = torch.cat([_recurrence(*(t[:37] for t in inputs[:5]), *inputs[5:], want_pool[2], 0.25),
                      _recurrence(*(t[37:] for t in inputs[:5]), *inputs[5:], want_pool[0], 0.25)])  # fmt: skip
    config = {"formulation": "dot", "CHUNK": 16, "BLOCK_V": 16}
    pools = {}
    for bf16 in (False, True):
        plan = gdn._get_plan
        monkeypatch.setattr(gdn, "_get_plan", lambda *a: dataclasses.replace(plan(*a), bf16_workspace=bf16))
        pool = pools[bf16] = pool0.clone()
        got = gated_delta_rule_prefill(*inputs, pool, index_tensor([2, 0]), start_locs(lengths), config=config)
        monkeypatch.setattr(gdn, "_get_plan", plan)
        torch.testing.assert_close(got.double().cpu(), want, **_tolerance(torch.bfloat16))
        bound = BF16_WORKSPACE_STATE if bf16 or capabilities().dot_bf16 else dict(atol=2e-4, rtol=2e-4)
        torch.testing.assert_close(pool.double().cpu(), want_pool, **bound)
    assert not torch.equal(pools[False], pools[True])


def test_chunk_64_across_two_chunks_with_gqa():
    """The default chunk (64) on a request of 70 tokens and one of 3, 4 value heads per key head."""
    gen = torch.Generator().manual_seed(11)
    inputs = _inputs(gen, 73, 1, 4, 16, 16, torch.float32)
    pool = randn(gen, 2, 4, 16, 16, scale=0.3)
    want_pool = pool.double().clone()
    want = torch.cat([_recurrence(*(t[:70] for t in inputs[:5]), *inputs[5:], want_pool[1], 0.25),
                      _recurrence(*(t[70:] for t in inputs[:5]), *inputs[5:], want_pool[0], 0.25)])  # fmt: skip
    got = gated_delta_rule_prefill(*inputs, pool, index_tensor([1, 0]), start_locs([70, 3]),
                                   config={"CHUNK": 64, "BLOCK_V": 16})  # fmt: skip
    torch.testing.assert_close(got.double(), want, atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(pool.double(), want_pool, atol=2e-4, rtol=2e-4)


@given(cut=st.integers(0, 20), formulation=st.sampled_from(["dot", "sum"]), seed=st.integers(0, 2**31 - 1))
def test_prefill_cut_anywhere_then_decode_is_one_recurrence(cut, formulation, seed):
    """prefill(0:cut) from zeros, prefill(cut:20) from the state it left, then
    decode tokens 20 and 21: the recurrence over all 22 tokens at once."""
    gen = torch.Generator().manual_seed(seed)
    inputs = _inputs(gen, 22, 2, 2, 16, 16, torch.float32)
    want_state = torch.zeros(4, 16, 16, dtype=torch.float64)
    want = _recurrence(*inputs[:5], *inputs[5:], want_state, 0.25)
    pool = torch.full((2, 4, 16, 16), float("nan"), device=DEVICE)  # a stale slot: never read
    config = {"formulation": formulation, "CHUNK": 16 if formulation == "dot" else 8, "BLOCK_V": 16}
    outs = []
    for s, e in ((0, cut), (cut, 20)):
        if e > s:
            part = [t[s:e] for t in inputs[:5]]
            outs.append(gated_delta_rule_prefill(*part, *inputs[5:], pool, index_tensor([0]), start_locs([e - s]),
                                                 index_tensor([s > 0], torch.bool), config=config))  # fmt: skip
    for t in (20, 21):
        outs.append(gated_delta_rule_decode(*(x[t : t + 1] for x in inputs[:5]), *inputs[5:], pool, index_tensor([0])))
    torch.testing.assert_close(torch.cat(outs).double().cpu(), want, atol=3e-4, rtol=3e-4)
    torch.testing.assert_close(pool[0].double().cpu(), want_state, atol=3e-4, rtol=3e-4)
    assert pool[1].isnan().all()


def _bad(op, **change):
    gen = torch.Generator().manual_seed(0)
    q, k, v, a, b, A_log, dt_bias = _inputs(gen, 4, 2, 2, 16, 16, torch.float32)
    args = dict(q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, state_pool=torch.zeros(3, 4, 16, 16),
                cache_indices=index_tensor([0, 1, 2, -1] if op is gated_delta_rule_decode else [0, 2]))  # fmt: skip
    if op is gated_delta_rule_prefill:
        args["query_start_loc"] = start_locs([3, 1])
    args.update(change)
    return args


@pytest.mark.parametrize("op", [gated_delta_rule_decode, gated_delta_rule_prefill], ids=lambda f: f.__name__)
@pytest.mark.parametrize("change, match", [
    (dict(v=torch.zeros(4, 3, 16)), "must be a multiple of key heads"),
    (dict(state_pool=torch.zeros(3, 4, 16, 8)), "state_pool must be"),
    (dict(a=torch.zeros(4, 3)), "a must be"),
    (dict(A_log=torch.zeros(3)), "A_log has 3 entries"),
    (dict(scale=-1.0), "scale must be > 0"),
    (dict(cache_indices="dup"), "names a slot twice"),
])  # fmt: skip
def test_bad_inputs_are_refused_and_change_nothing(op, change, match):
    if change.get("cache_indices") == "dup":
        change = dict(cache_indices=index_tensor([1, 1, 0, 2] if op is gated_delta_rule_decode else [1, 1]))
    args = _bad(op, **change)
    before = args["state_pool"].clone()
    with pytest.raises((ValueError, TypeError), match=f"{op.__name__}: .*{match}|{match}"):
        op(**args)
    assert torch.equal(args["state_pool"], before)
