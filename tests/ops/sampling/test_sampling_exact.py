"""Exact properties of the sampling ops: greedy, reproducibility, renormalised
probs against the sort-based float64 reference, edge cases and bad input.

Oracles: torch.argmax, the plain sort-based reference (`kunlun_triton.ops.sampling.reference`,
which follows SGLang's top_k_top_p_min_p_sampling_from_probs_torch), and the
ops' own documented invariants (same seed and position -> same token).
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import strategies
from strategies import DEVICE

from kunlun_triton.ops import sampling as ops
from kunlun_triton.ops.sampling import reference as ref
from kunlun_triton.testing import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _logits(batch, vocab, seed=0, dtype=torch.float32, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, vocab, generator=gen).to(DEVICE) * scale).to(dtype)


def _params(batch, seed=0):
    """Per-row parameters covering greedy rows and every filter."""
    gen = torch.Generator().manual_seed(seed)
    temps = torch.rand(batch, generator=gen).to(DEVICE) * 1.5 + 0.2
    temps[::7] = 0.0
    top_ks = torch.randint(1, 60, (batch,), generator=gen).to(DEVICE)
    top_ks[1::5] = -1
    top_ps = torch.rand(batch, generator=gen).to(DEVICE) * 0.9 + 0.1
    top_ps[2::4] = 1.0
    min_ps = torch.rand(batch, generator=gen).to(DEVICE) * 0.3
    min_ps[::3] = 0.0
    return temps, top_ks, top_ps, min_ps


def _ref_top_ks(top_ks, vocab):
    return torch.where(top_ks < 1, vocab, top_ks)


@pytest.mark.parametrize("dtype", DTYPES)
def test_greedy_matches_argmax(dtype):
    logits = _logits(37, 300, dtype=dtype)
    assert torch.equal(ops.greedy(logits), torch.argmax(logits.float(), dim=1))


@given(rows=strategies.row_tensors(max_rows=6))
def test_greedy_matches_argmax_on_strided_rows(rows):
    assert torch.equal(ops.greedy(rows), torch.argmax(rows.float(), dim=1))


def test_greedy_ties_nan_and_empty_rows():
    logits = torch.full((4, 70), -5.0, device=DEVICE)
    logits[0, [9, 3, 40]] = 2.0  # tie: lowest id wins
    logits[1, :] = float("nan")
    logits[1, 66] = 1.0  # NaN never wins
    logits[2, :] = float("-inf")  # no finite logit: token 0
    logits[3, 5] = float("nan")
    logits[3, 69] = 0.0
    assert ops.greedy(logits).tolist() == [3, 66, 0, 69]


@pytest.mark.parametrize("dtype", DTYPES)
def test_temperature_zero_and_top_k_one_are_greedy(dtype):
    batch, vocab = 24, 257
    logits = _logits(batch, vocab, seed=1, dtype=dtype)
    logits[0, [17, 200]] = logits[0].max() + 1  # a tie for the top
    expected = torch.argmax(logits.float(), dim=1)
    temps, top_ks, top_ps, min_ps = _params(batch, seed=1)
    seeds = torch.arange(batch, device=DEVICE)
    by_temperature = ops.sample(logits, 0.0, top_ks, top_ps, min_ps, seeds)
    by_top_k = ops.sample(logits, temps.clamp(min=0.5), 1, top_ps, min_ps, seeds)
    assert torch.equal(by_temperature, expected)
    assert torch.equal(by_top_k, expected)
    assert by_temperature[0] == 17


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_same_seed_and_position_same_token_in_any_batch(dtype):
    batch, vocab = 40, 150
    logits = _logits(batch, vocab, seed=2, dtype=dtype, scale=1.0)
    temps, top_ks, top_ps, min_ps = _params(batch, seed=2)
    seeds = torch.randint(0, 2**62, (batch,), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    positions = torch.randint(0, 10**6, (batch,), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    args = (temps, top_ks, top_ps, min_ps, seeds, positions)
    tokens = ops.sample(logits, *args)
    perm = torch.randperm(batch, generator=torch.Generator().manual_seed(4))
    permuted = ops.sample(logits[perm], *(a[perm] for a in args))
    assert torch.equal(permuted, tokens[perm])
    # a sub-batch padded with unrelated rows
    sub = torch.arange(3, batch, 4, device=DEVICE)
    others = _logits(5, vocab, seed=9, dtype=dtype)
    mixed_logits = torch.cat([others, logits[sub]])
    mixed_args = [torch.cat([a[:5].flip(0), a[sub]]) for a in args]
    assert torch.equal(ops.sample(mixed_logits, *mixed_args)[5:], tokens[sub])
    # the same again: no state between calls
    assert torch.equal(ops.sample(logits, *args), tokens)


def test_tokens_match_the_reference_draw():
    """The kernel's tokens equal the reference's Gumbel-max draw over the
    float64 sort-based distribution (same counter-based noise). A token may
    differ only where fp32 and fp64 disagree on a near-tie, hence <= 1%."""
    batch, vocab = 200, 211
    logits = _logits(batch, vocab, seed=5)
    temps, top_ks, top_ps, min_ps = _params(batch, seed=5)
    seeds, positions = torch.arange(batch, device=DEVICE) * 7919, torch.arange(batch, device=DEVICE) + 11
    tokens = ops.sample(logits, temps, top_ks, top_ps, min_ps, seeds, positions)
    expected = ref.sample(logits, temps, _ref_top_ks(top_ks, vocab), top_ps, min_ps, seeds, positions)
    assert (tokens != expected).float().mean().item() <= 0.01
    allowed = ref.filtered_probs(logits, temps, _ref_top_ks(top_ks, vocab), top_ps, min_ps)
    assert (allowed.gather(1, tokens.view(-1, 1)) > 0).all()


def test_unchecked_calls_convert_numbers_and_dtypes_and_skip_the_checks():
    """check=False (SGLang's call) still turns numbers into rows and int32
    seeds into int64 (the draw is the reference's), and runs no value check:
    an out-of-range top_p is not rejected (it would be, checked)."""
    batch, vocab = 40, 97
    logits = _logits(batch, vocab, seed=12)
    temps = torch.rand(batch, device=DEVICE) + 0.3
    seeds, positions = torch.arange(batch, dtype=torch.int32, device=DEVICE) * 31, torch.arange(batch, device=DEVICE)
    tokens = ops.sample(logits, temps, 9, 0.8, 0.0, seeds, positions, check=False)
    full = lambda v, dtype=torch.float32: torch.full((batch,), v, dtype=dtype, device=DEVICE)  # noqa: E731
    expected = ref.sample(logits, temps, full(9, torch.int64), full(0.8), full(0.0), seeds.long(), positions)
    assert (tokens != expected).float().mean().item() <= 0.025
    top_ps = full(0.8)
    top_ps[3] = 1.5
    with pytest.raises(ValueError, match="top_ps"):
        ops.sample(logits, temps, 9, top_ps, 0.0, seeds, positions)
    assert ops.sample(logits, temps, 9, top_ps, 0.0, seeds, positions, check=False).shape == (batch,)
    with pytest.raises(ValueError, match="top_ps"):
        ops.top_p_renorm_probs(torch.softmax(logits, 1), top_ps)
    assert ops.top_p_renorm_probs(torch.softmax(logits, 1), top_ps, check=False).shape == (batch, vocab)
    assert torch.equal(ops.greedy(logits, check=False), torch.argmax(logits, dim=1))


def test_multi_tile_path_matches_one_tile():
    """Rows cut into several blocks (the GPU case) draw the reference's
    tokens as one-block rows do; renormalised probs and greedy agree."""
    batch, vocab = 16, 200
    logits = _logits(batch, vocab, seed=6)
    temps, top_ks, top_ps, min_ps = _params(batch, seed=6)
    seeds, positions = torch.arange(batch, device=DEVICE), torch.zeros(batch, dtype=torch.long, device=DEVICE)
    args = (temps, top_ks, top_ps, min_ps, seeds, positions)
    probs = torch.softmax(logits, dim=1)

    def run(config):
        return (ops.sample(logits, *args, config=config), ops.renorm_probs(probs, top_ks, top_ps, min_ps, config=config),
                ops.greedy(logits, config=config))  # fmt: skip

    one_tile = run({"BLOCK_R": 16, "BLOCK_V": 256})
    tiled = run({"BLOCK_R": 16, "BLOCK_V": 64})
    expected = ref.sample(logits, temps, _ref_top_ks(top_ks, vocab), top_ps, min_ps, seeds, positions)
    # the same draw up to fp32 rounding of a near tie (block-relative scores)
    assert (tiled[0] != one_tile[0]).float().mean().item() <= 1 / batch
    assert (tiled[0] != expected).float().mean().item() <= 1 / batch
    assert_close(tiled[1], one_tile[1])
    assert torch.equal(tiled[2], one_tile[2])


@pytest.mark.parametrize("which", ["top_k", "top_p", "min_p", "all"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_renorm_probs_match_reference(which, dtype):
    batch, vocab = 16, 180
    probs = torch.softmax(_logits(batch, vocab, seed=7), dim=1)
    probs[0, :] = 1.0 / vocab  # all tied
    probs[1, :4] = probs[1, 4:8]  # pairs of ties
    probs = probs.to(dtype)
    _, top_ks, top_ps, min_ps = _params(batch, seed=7)
    neutral = {"top_k": torch.full((batch,), vocab, device=DEVICE), "top_p": torch.ones(batch, device=DEVICE), "min_p": torch.zeros(batch, device=DEVICE)}
    if which == "top_k":
        out, used = ops.top_k_renorm_probs(probs, top_ks), (top_ks, neutral["top_p"], neutral["min_p"])
    elif which == "top_p":
        out, used = ops.top_p_renorm_probs(probs, top_ps), (neutral["top_k"], top_ps, neutral["min_p"])
    elif which == "min_p":
        out, used = ops.min_p_renorm_probs(probs, min_ps), (neutral["top_k"], neutral["top_p"], min_ps)
    else:
        out, used = ops.renorm_probs(probs, top_ks, top_ps, min_ps), (top_ks, top_ps, min_ps)
    expected = ref.renorm_probs(probs, _ref_top_ks(used[0], vocab), used[1], used[2])
    assert out.dtype == dtype
    assert_close(out, expected.to(dtype), dtype=dtype)
    assert torch.equal(out > 0, expected > 0)  # the same support, exactly


def test_renorm_top_k_keeps_ties_and_handles_empty_rows():
    probs = torch.tensor([[0.1, 0.3, 0.3, 0.3], [0.0, 0.0, 0.0, 0.0], [0.5, 0.2, 0.2, 0.1]], device=DEVICE)
    out = ops.top_k_renorm_probs(probs, torch.tensor([2, 1, 2], device=DEVICE))
    expected = torch.tensor([[0.0, 1 / 3, 1 / 3, 1 / 3], [0.0, 0.0, 0.0, 0.0], [5 / 9, 2 / 9, 2 / 9, 0.0]], device=DEVICE)
    assert_close(out, expected)


def test_edge_parameters():
    batch, vocab = 8, 120
    logits = _logits(1, vocab, seed=8).expand(batch, vocab).contiguous()
    positions = torch.arange(batch, device=DEVICE)
    # top_k past the vocabulary and -1, top_p 1, min_p 0: every token stays reachable
    for top_k in (vocab + 5, -1, 10**9):
        probs = ops.renorm_probs(torch.softmax(logits, 1), top_k, 1.0, 0.0)
        assert_close(probs, torch.softmax(logits, 1))
    # min_p 1: only the top token (and its ties) can be drawn
    tied = logits.clone()
    tied[:, [30, 90]] = logits.max() + 2
    tokens = ops.sample(tied, 1.0, -1, 1.0, 1.0, seeds=torch.arange(batch, device=DEVICE) * 3, positions=positions)
    assert set(tokens.tolist()) <= {30, 90}
    # one finite logit: always that token, whatever the filters
    lonely = torch.full((batch, vocab), float("-inf"), device=DEVICE)
    lonely[:, 77] = -3.0
    tokens = ops.sample(lonely, 0.9, 5, 0.3, 0.2, seeds=torch.arange(batch, device=DEVICE), positions=positions)
    assert tokens.tolist() == [77] * batch
    # all-equal logits: top_k 3 keeps every tied token, top_p keeps the tie too
    flat = torch.zeros(64, 16, device=DEVICE)
    tokens = ops.sample(flat, 1.0, 3, 0.1, 0.0, seeds=torch.arange(64, device=DEVICE), positions=torch.zeros(64, dtype=torch.long, device=DEVICE))
    assert len(set(tokens.tolist())) > 3


def test_bad_rows_do_not_disturb_the_batch():
    batch, vocab = 6, 90
    logits = _logits(batch, vocab, seed=10)
    temps, top_ks, top_ps, min_ps = (torch.full((batch,), 0.8, device=DEVICE), torch.full((batch,), 20, device=DEVICE),
                                     torch.full((batch,), 0.9, device=DEVICE), torch.zeros(batch, device=DEVICE))
    seeds, positions = torch.arange(batch, device=DEVICE), torch.arange(batch, device=DEVICE)
    clean = ops.sample(logits, temps, top_ks, top_ps, min_ps, seeds, positions)
    broken = logits.clone()
    broken[1] = float("nan")
    broken[3] = float("-inf")
    broken[4, ::2] = float("nan")  # NaNs in an otherwise usable row are never drawn
    tokens = ops.sample(broken, temps, top_ks, top_ps, min_ps, seeds, positions)
    assert tokens[1] == 0 and tokens[3] == 0
    assert tokens[4] % 2 == 1
    keep = [0, 2, 5]
    assert torch.equal(tokens[keep], clean[keep])
    with pytest.raises(ValueError, match=r"logits.*rows \[1, 3\]"):
        ops.sample(broken, temps, top_ks, top_ps, min_ps, seeds, positions, strict=True)


def test_generator_makes_runs_repeatable():
    batch, vocab = 64, 50
    logits = torch.zeros(batch, vocab, device=DEVICE)
    draw = lambda gen: ops.sample(logits, 1.0, -1, 1.0, 0.0, generator=gen)  # noqa: E731
    first = draw(torch.Generator().manual_seed(123))
    assert torch.equal(draw(torch.Generator().manual_seed(123)), first)
    assert not torch.equal(draw(torch.Generator().manual_seed(124)), first)
    assert first.dtype == torch.int64 and first.shape == (batch,)


@pytest.mark.parametrize(
    "override, error, match",
    [
        ({"temperatures": -0.5}, ValueError, "temperatures"),
        ({"temperatures": float("nan")}, ValueError, "temperatures"),
        ({"top_ks": 0}, ValueError, "top_ks"),
        ({"top_ks": -2}, ValueError, "top_ks"),
        ({"top_ps": 0.0}, ValueError, "top_ps"),
        ({"top_ps": 1.01}, ValueError, "top_ps"),
        ({"min_ps": -0.1}, ValueError, "min_ps"),
        ({"min_ps": 1.5}, ValueError, "min_ps"),
        ({"top_ks": torch.ones(3, dtype=torch.long, device=DEVICE)}, ValueError, "top_ks"),
        ({"temperatures": torch.ones(4, 1, device=DEVICE)}, ValueError, "temperatures"),
        ({"top_ks": torch.ones(4, device=DEVICE)}, TypeError, "top_ks"),
        ({"top_ps": torch.ones(4, dtype=torch.long, device=DEVICE)}, TypeError, "top_ps"),
        ({"seeds": torch.ones(4, device=DEVICE)}, TypeError, "seeds"),
        ({"positions": torch.arange(5, device=DEVICE)}, ValueError, "positions"),
        ({"logits": torch.zeros(4, 10, dtype=torch.float64, device=DEVICE)}, TypeError, "logits"),
        ({"logits": torch.zeros(40, device=DEVICE)}, ValueError, "logits"),
        ({"logits": torch.zeros(10, 4, device=DEVICE).t()}, ValueError, "logits"),
        ({"logits": [[0.0]]}, TypeError, "logits"),
    ],
)
def test_bad_input_raises(override, error, match):
    kwargs = {"logits": torch.zeros(4, 10, device=DEVICE), "temperatures": 1.0, "top_ks": 5, "top_ps": 0.9, "min_ps": 0.0}
    kwargs.update(override)
    with pytest.raises(error, match=match):
        ops.sample(**kwargs)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda p: ops.top_k_renorm_probs(p, 0), "top_ks"),
        (lambda p: ops.top_p_renorm_probs(p, 1.5), "top_ps"),
        (lambda p: ops.min_p_renorm_probs(p, -1.0), "min_ps"),
        (lambda p: ops.top_p_renorm_probs(p[0], 0.5), "probs"),
        (lambda p: ops.greedy(p.t()), "logits"),
    ],
)
def test_bad_renorm_and_greedy_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call(torch.full((3, 8), 1 / 8, device=DEVICE))


@given(batch=st.integers(0, 3))
def test_empty_and_tiny_batches(batch):
    logits = torch.randn(batch, 5, device=DEVICE)
    tokens = ops.sample(logits, 1.0, 2, 0.9, 0.1, seeds=1)
    assert tokens.shape == (batch,) and tokens.dtype == torch.int64
    assert ((tokens >= 0) & (tokens < 5)).all()


def test_wide_rows_keep_exactly_the_reference_support():
    """5000-token rows in 1024-wide tiles (the GPU layout, scaled down): the
    kept set equals the sort-based reference's, ties at the top included."""
    config = {"BLOCK_R": 4, "BLOCK_V": 1024}
    batch, vocab = 8, 5000
    logits = _logits(batch, vocab, seed=11, scale=2.5)
    logits[0, 100:110] = logits[0].max()
    temps = torch.tensor([0.7, 1.0, 0.7, 1.0, 1.0, 1.3, 0.5, 1.0], device=DEVICE)
    top_ks = torch.tensor([50, vocab, 20, 1000, 7, -1, 300, 5], device=DEVICE)
    top_ps = torch.tensor([0.9, 0.9, 1.0, 0.8, 0.5, 0.95, 0.99, 0.3], device=DEVICE)
    min_ps = torch.tensor([0.0, 0.0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.2], device=DEVICE)
    probs = torch.softmax(logits / temps.view(-1, 1), dim=1)
    out = ops.renorm_probs(probs, top_ks, top_ps, min_ps, config=config)
    expected = ref.renorm_probs(probs, _ref_top_ks(top_ks, vocab), top_ps, min_ps)
    assert torch.equal(out > 0, expected > 0)
    assert_close(out, expected.float())
    seeds, positions = torch.arange(batch, device=DEVICE), torch.arange(batch, device=DEVICE)
    tokens = ops.sample(logits, temps, top_ks, top_ps, min_ps, seeds, positions, config=config)
    allowed = ref.filtered_probs(logits, temps, _ref_top_ks(top_ks, vocab), top_ps, min_ps)
    assert (allowed.gather(1, tokens.view(-1, 1)) > 0).all()


def test_torch_fallback_draws_the_same_tokens(monkeypatch):
    """Where no Triton target runs, the ops run the reference: same filters,
    same counter-based noise, so seeded tokens do not depend on the path."""
    batch, vocab = 32, 90
    logits = _logits(batch, vocab, seed=12)
    temps, top_ks, top_ps, min_ps = _params(batch, seed=12)
    args = (temps, top_ks, top_ps, min_ps, torch.arange(batch, device=DEVICE) * 31, torch.arange(batch, device=DEVICE))
    probs = torch.softmax(logits, dim=1)
    on_triton = ops.sample(logits, *args), ops.renorm_probs(probs, top_ks, top_ps, min_ps)
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", "torch")
    on_torch = ops.sample(logits, *args), ops.renorm_probs(probs, top_ks, top_ps, min_ps)
    assert (on_torch[0] != on_triton[0]).float().mean().item() <= 0.05
    assert on_torch[1].dtype == probs.dtype
    assert_close(on_torch[1], on_triton[1])


@given(rows=strategies.row_tensors(max_rows=5), params_seed=st.integers(0, 2**16))
def test_random_rows_draw_inside_the_reference_support(rows, params_seed):
    """Any width (1, 13, 127, 5120, ...), dtype and row stride: every drawn
    token has positive probability under the float64 sort-based reference,
    and greedy rows return the argmax."""
    batch, vocab = rows.shape
    temps, top_ks, top_ps, min_ps = _params(batch, seed=params_seed)
    seeds = torch.arange(batch, device=DEVICE) + params_seed
    tokens = ops.sample(rows, temps, top_ks, top_ps, min_ps, seeds, torch.zeros(batch, dtype=torch.long, device=DEVICE))
    allowed = ref.filtered_probs(rows, temps, _ref_top_ks(top_ks, vocab), top_ps, min_ps)
    assert (allowed.gather(1, tokens.view(-1, 1)) > 0).all()
    greedy_rows = (temps == 0) | (top_ks == 1)
    assert torch.equal(tokens[greedy_rows], torch.argmax(rows.float(), dim=1)[greedy_rows])
