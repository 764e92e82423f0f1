"""Extreme values never bias a draw or a renormalisation.

`sample`: logits of any magnitude, offset by any constant (1e7 + unit
steps, up to the float limit, with a temperature on the scale of the
steps), and several +inf logits, draw from the float64 reference
distribution; the kernels subtract the row max before scaling by the
temperature. `renorm_probs`: NaN and negative entries count as zero, +inf
as the largest float, and any magnitude (denormals to 3e38) renormalises
like the unscaled row.

Oracles: `reference.filtered_probs` / `reference.renorm_probs` in float64 on
the very fp32 values the kernels get, with chi-square tests for draws
(false-failure rate ALPHA per example, hypothesis derandomised in CI).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stats import chi_square_p_value
from strategies import DEVICE

from kunlun_triton.ops import sampling as api
from kunlun_triton.ops.sampling import reference as ref
from kunlun_triton.testing import assert_close

ALPHA = 1e-5
DRAWS = 2048
FLT_MAX = torch.finfo(torch.float32).max


def _draw(logits_row, temp, top_k, top_p, min_p, config=None):
    """DRAWS tokens from one row (distinct positions), and the reference distribution."""
    vocab = logits_row.shape[-1]
    logits = logits_row.view(1, vocab).to(DEVICE).expand(DRAWS, vocab).contiguous()
    tokens = api.sample(logits, temp, top_k, top_p, min_p, seeds=99, positions=torch.arange(DRAWS, device=DEVICE),
                        config=config)  # fmt: skip
    one = lambda v: torch.tensor([v], device=DEVICE)  # noqa: E731
    probs = ref.filtered_probs(logits[:1], one(temp), one(top_k if top_k > 0 else vocab), one(top_p), one(min_p))[0]
    return tokens, probs


def _assert_follows(tokens, probs):
    assert (probs[tokens] > 0).all(), "a token outside the kept set was drawn"
    assert chi_square_p_value(torch.bincount(tokens, minlength=probs.numel()), probs) > ALPHA


@st.composite
def offset_rows(draw, vocab=12):
    """fp32 logits c + k * ulp(c) (k small integers, so the steps are exact)
    for offsets c from 0 to the float limit, either sign, and a temperature
    on the scale of the steps, so the distribution is far from one-hot."""
    exponent = draw(st.sampled_from([0, 1, 4, 7, 12, 20, 30, 37, 38]))
    mantissa = draw(st.floats(1.0, 3.4 if exponent == 38 else 9.99))
    sign = draw(st.sampled_from([1.0, -1.0]))
    c = torch.tensor(sign * mantissa * 10.0**exponent, dtype=torch.float32)
    ulp = (torch.nextafter(c.abs(), torch.tensor(math.inf)) - c.abs()).item() if c != 0 else 2**-20
    steps = torch.tensor(draw(st.lists(st.integers(0, 12), min_size=vocab, max_size=vocab)), dtype=torch.float64)
    row = (c.double() - steps * ulp * sign).float()  # towards zero: never past the float limit
    assert torch.isfinite(row).all()
    temp = draw(st.sampled_from([0.5, 1.0, 3.0])) * ulp
    return row, temp


@given(case=offset_rows(), filters=st.sampled_from([(-1, 1.0, 0.0), (4, 1.0, 0.0), (-1, 0.8, 0.0), (6, 0.9, 0.1)]))
def test_offsets_and_magnitudes_do_not_bias_the_draw(case, filters):
    row, temp = case
    _assert_follows(*_draw(row, temp, *filters))


@settings(max_examples=4)
@given(case=offset_rows(vocab=300), filters=st.sampled_from([(40, 1.0, 0.0), (-1, 0.7, 0.0), (150, 0.95, 0.05)]))
def test_offsets_on_split_rows(case, filters):
    """The same across several blocks: block maxima differ from the row's."""
    row, temp = case
    tokens, probs = _draw(row, temp, *filters, config={"BLOCK_R": 512, "BLOCK_V": 64})
    _assert_follows(tokens, probs)


@given(
    n_inf=st.integers(2, 5),
    others=st.sampled_from(["finite", "huge", "-inf", "nan"]),
    temp=st.sampled_from([0.3, 1.0, 7.0]),
    seed=st.integers(0, 2**16),
)
def test_several_inf_logits_share_the_draw_evenly(n_inf, others, temp, seed):
    gen = torch.Generator().manual_seed(seed)
    vocab = 40
    row = {"finite": torch.randn(vocab, generator=gen) * 3, "huge": torch.full((vocab,), 3.0e38),
           "-inf": torch.full((vocab,), float("-inf")), "nan": torch.full((vocab,), float("nan"))}[others]  # fmt: skip
    hot = torch.randperm(vocab, generator=gen)[:n_inf]
    row[hot] = float("inf")
    tokens, probs = _draw(row, temp, -1, 1.0, 0.0)
    expected = torch.zeros(vocab, dtype=torch.float64)
    expected[hot] = 1.0 / n_inf
    assert torch.allclose(probs.cpu(), expected)  # the reference agrees: +inf acts as the largest float
    _assert_follows(tokens, expected.to(probs.device))


def test_large_offsets_keep_top_p_and_min_p_exact():
    """1e7 + unit steps at temperature 1: the kernels see differences of 1,
    not 1e7 / T rounded."""
    steps = torch.tensor([0.0, 1, 1, 2, 3, 5, 8, 0, 4, 2])
    row = (1e7 - steps).float()
    for filters in ((-1, 1.0, 0.0), (3, 1.0, 0.0), (-1, 0.6, 0.0), (-1, 1.0, 0.1)):
        _assert_follows(*_draw(row, 1.0, *filters))


# ---- renorm_probs ----


@given(
    magnitude=st.integers(-40, 38),
    bad=st.lists(st.sampled_from(["nan", "neg", "-inf", "zero"]), min_size=0, max_size=4),
    filters=st.sampled_from([(None, None, None), (3, None, None), (None, 0.7, None), (None, None, 0.2), (5, 0.9, 0.1)]),
    seed=st.integers(0, 2**16),
)
def test_renorm_any_magnitude_and_bad_entries(magnitude, bad, filters, seed):
    """A row scaled by 10**magnitude (denormals to 1e38, whose sum overflows
    fp32) renormalises as the reference does in float64; NaN, negative and
    -inf entries count as zero."""
    gen = torch.Generator().manual_seed(seed)
    vocab = 24
    row = ((torch.rand(vocab, generator=gen).double() + 0.05) * 10.0**magnitude).float()
    positions = torch.randperm(vocab, generator=gen)[: len(bad)]
    for pos, kind in zip(positions.tolist(), bad):
        row[pos] = {"nan": float("nan"), "neg": -1.0, "-inf": float("-inf"), "zero": 0.0}[kind]
    probs = row.view(1, -1).to(DEVICE)
    top_k, top_p, min_p = filters
    out = api.renorm_probs(probs, top_k, top_p, min_p)
    one = lambda v, default: torch.tensor([default if v is None else v], device=DEVICE)  # noqa: E731
    expected = ref.renorm_probs(probs, one(top_k, vocab), one(top_p, 1.0), one(min_p, 0.0))
    assert torch.isfinite(out).all()
    assert out[0, positions].eq(0).all()
    assert torch.equal(out > 0, expected > 0)
    assert_close(out, expected.float(), atol=2e-6, rtol=1e-5)


def test_renorm_nan_and_negatives_never_take_the_mass():
    probs = torch.tensor([[float("nan"), 0.2, 0.3], [-5.0, 0.5, 0.5], [float("nan"), float("nan"), 1.0]], device=DEVICE)
    expected = torch.tensor([[0.0, 0.4, 0.6], [0.0, 0.5, 0.5], [0.0, 0.0, 1.0]], device=DEVICE)
    for call in (lambda: api.renorm_probs(probs), lambda: api.top_k_renorm_probs(probs, 2),
                 lambda: api.top_p_renorm_probs(probs, 1.0), lambda: api.min_p_renorm_probs(probs, 0.0)):  # fmt: skip
        assert_close(call(), expected)


@pytest.mark.parametrize("config", [None, {"BLOCK_R": 2, "BLOCK_V": 4}])
def test_renorm_entries_near_the_float_limit(config):
    big = 3e38
    probs = torch.tensor([[big, big, 0.0, 1.0], [float("inf"), 1e38, 0.0, 0.0], [big, 1e-45, 0.0, 0.0]], device=DEVICE)
    out = api.renorm_probs(probs, config=config)
    expected = torch.tensor([[0.5, 0.5, 0.0, 1 / 6e38], [FLT_MAX / (FLT_MAX + 1e38), 1e38 / (FLT_MAX + 1e38), 0, 0],
                             [1.0, 0.0, 0.0, 0.0]], device=DEVICE)  # fmt: skip
    assert_close(out, expected, atol=1e-7, rtol=1e-6)
    # top-p 0.4 keeps the first 3e38 and, tied with it, the second
    assert_close(api.top_p_renorm_probs(probs, 0.4, config=config)[0], torch.tensor([0.5, 0.5, 0, 0], device=DEVICE))


@pytest.mark.parametrize("top_ks", [2**70, -(2**70), 2**63])
def test_top_ks_past_int64_is_a_named_error(top_ks):
    """Issue 25: sample(..., top_ks=2**70) raised a bare OverflowError."""
    logits = torch.randn(2, 50, device=DEVICE)
    before = logits.clone()
    with pytest.raises(ValueError, match="sample: top_ks must fit in int64"):
        api.sample(logits, 1.0, top_ks, 1.0, 0.0)
    assert torch.equal(logits, before)


def test_greedy_checked_on_bf16_logits_of_a_5000_vocab():
    """Issue 25: checked greedy on bf16 logits, vocab 5000, raised NameError
    in the check itself. Oracle: torch.argmax of the fp32 values (first max)."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 5000, generator=gen).to(torch.bfloat16).to(DEVICE)
    out = api.greedy(logits, check=True)
    assert torch.equal(out, logits.float().argmax(-1))


# ---- issue 39 row 8: extreme but valid values in one batch ----


def test_extreme_values_in_a_batch_raise_no_warning_and_reach_no_nan():
    """Temperature 1e308 (+inf once stored in fp32, as SGLang stores it) and
    top_p / min_p 1e-308 (0 in fp32) next to ordinary rows, with NaN and
    -inf logits and a vocabulary that does not fill the last block. Before the
    fix, 1 / inf = 0 multiplied the -inf of masked lanes: the interpreter
    warned 'invalid value encountered in multiply' and the NaN reached the
    block sums top-p reads. Warnings are errors here; every row must draw
    from the float64 reference distribution (T = inf: every finite logit
    equally likely)."""
    import warnings

    vocab, reps = 37, 320
    gen = torch.Generator().manual_seed(39)
    base = torch.randn(4, vocab, generator=gen) * 3
    base[0, 3], base[1, 5], base[2, 7] = float("-inf"), float("nan"), float("-inf")
    temps = torch.tensor([1e308, 0.7, 1e308, 1.0]).float()
    top_ks = torch.tensor([-1, 5, 8, -1])
    top_ps = torch.tensor([1.0, 1e-308, 0.9, 1e-308]).float()
    min_ps = torch.tensor([1e-308, 0.0, 1e-308, 0.1]).float()
    assert torch.isinf(temps[0]) and top_ps[1] == 0 and min_ps[0] == 0
    logits = base.repeat(reps, 1).to(DEVICE)
    rows = lambda t: t.repeat(reps).to(DEVICE)  # noqa: E731
    positions = torch.arange(4 * reps, device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for config in (None, {"BLOCK_R": 4, "BLOCK_V": 16}):
            tokens = api.sample(logits, rows(temps), rows(top_ks), rows(top_ps), rows(min_ps), seeds=5,
                                positions=positions, check=False, config=config).view(reps, 4)  # fmt: skip
            expected = ref.filtered_probs(base, temps, top_ks, top_ps, min_ps)
            assert torch.isfinite(expected).all()
            assert torch.allclose(expected[0, :3], torch.full((3,), 1.0 / (vocab - 1), dtype=torch.float64))
            for r in range(4):
                _assert_follows(tokens[:, r].cpu(), expected[r])
        probs = torch.softmax(base, dim=1).nan_to_num(0.0).to(DEVICE)
        out = api.renorm_probs(probs, top_ks.to(DEVICE), top_ps.to(DEVICE), min_ps.to(DEVICE), check=False)
    assert torch.isfinite(out).all()
    expected = ref.renorm_probs(probs, torch.where(top_ks < 1, vocab, top_ks), top_ps, min_ps)
    assert_close(out, expected.float().to(DEVICE), atol=2e-6, rtol=1e-5)


def test_infinite_temperature_passes_the_checks():
    """SGLang takes any temperature >= 0 and stores it in fp32, so 1e308 is
    +inf: a checked call accepts it (and still refuses NaN and negatives)."""
    logits = torch.randn(2, 20, device=DEVICE)
    tokens = api.sample(logits, torch.tensor([float("inf"), 1.0], device=DEVICE), -1, 1.0, 0.0, seeds=1)
    assert tokens.shape == (2,) and bool(((tokens >= 0) & (tokens < 20)).all())
