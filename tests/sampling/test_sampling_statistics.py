"""Statistical tests: the ops' draws follow the float64 sort-based reference
distribution, stay inside its support, and are independent across positions
and seeds.

Each test draws N = 4096 tokens (one row per draw, distinct positions or
seeds) and runs a Pearson chi-square test; it fails when the p-value is below
ALPHA = 1e-5, so a correct sampler fails a given test with probability 1e-5
(the seeds are fixed, so a run is reproducible either way). A filter that
kept or dropped a token wrongly moves tens of standard deviations at this N.
"""

import pytest
import torch

from kunlun_triton.ops import sampling as ops
from kunlun_triton.reference import sampling as ref

N = 4096
ALPHA = 1e-5
MIN_EXPECTED = 5.0  # chi-square cells with fewer expected draws are pooled


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit of integer `counts` to `probs` (float64, sums to 1)."""
    expected = probs * counts.sum()
    big = expected >= MIN_EXPECTED
    observed = torch.cat([counts[big].double(), counts[~big].sum().view(1).double()])
    expected = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    stat = ((observed - expected) ** 2 / expected).sum()
    dof = max(int(keep.sum()) - 1, 1)
    return torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), stat / 2).item()


def independence_p_value(a: torch.Tensor, b: torch.Tensor, categories: int) -> float:
    """Chi-square test that paired draws a[i], b[i] are independent."""
    table = torch.zeros(categories, categories, dtype=torch.float64)
    table.index_put_((a, b), torch.ones(len(a), dtype=torch.float64), accumulate=True)
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    stat = ((table - expected) ** 2 / expected).sum()
    dof = (categories - 1) ** 2
    return torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), stat / 2).item()


CASES = {
    # name: (vocab, logit scale, temperature, top_k, top_p, min_p)
    "temperature-only": (64, 1.0, 0.7, -1, 1.0, 0.0),
    "top-k": (150, 1.5, 1.0, 12, 1.0, 0.0),
    "top-p": (200, 2.0, 1.2, -1, 0.8, 0.0),
    "min-p": (100, 1.0, 1.0, -1, 1.0, 0.2),
    "joint": (131, 2.0, 0.9, 30, 0.9, 0.05),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("vary", ["positions", "seeds"])
def test_draws_follow_the_reference_distribution(name, vary):
    vocab, scale, temp, top_k, top_p, min_p = CASES[name]
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    logits = (torch.randn(1, vocab, generator=gen) * scale).expand(N, vocab).contiguous()
    if vary == "positions":
        seeds, positions = torch.full((N,), 20240607), torch.arange(N) * 3 + 1
    else:
        seeds, positions = torch.arange(N) + 17, torch.full((N,), 5)
    tokens = ops.sample(logits, temp, top_k, top_p, min_p, seeds=seeds, positions=positions)
    probs = ref.filtered_probs(
        logits[:1], torch.tensor([temp]), torch.tensor([top_k if top_k > 0 else vocab]),
        torch.tensor([top_p]), torch.tensor([min_p]),
    )[0]
    assert (probs[tokens] > 0).all(), "a token outside the allowed set was drawn"
    if name != "temperature-only":
        assert (probs > 0).sum() < vocab, "the case must actually filter"
    counts = torch.bincount(tokens, minlength=vocab)
    assert chi_square_p_value(counts, probs) > ALPHA


def test_draws_without_seeds_follow_the_distribution():
    vocab = 40
    logits = (torch.randn(1, vocab, generator=torch.Generator().manual_seed(1)) * 1.5).expand(N, vocab)
    tokens = ops.sample(logits.contiguous(), 1.0, 25, 0.95, 0.0, generator=torch.Generator().manual_seed(9))
    probs = ref.filtered_probs(logits[:1], torch.ones(1), torch.tensor([25]), torch.tensor([0.95]), torch.zeros(1))[0]
    assert (probs[tokens] > 0).all()
    assert chi_square_p_value(torch.bincount(tokens, minlength=vocab), probs) > ALPHA


@pytest.mark.parametrize("step", ["position", "seed"])
def test_neighbouring_draws_are_independent(step):
    """Draw i and draw i+1 differ only in position (or seed) by one; over N/2
    pairs the 6x6 contingency table shows no dependence."""
    vocab = 6
    logits = torch.tensor([[0.0, 0.3, -0.2, 0.5, 0.1, -0.4]]).expand(N, vocab).contiguous()
    pairs = torch.arange(N) // 2
    if step == "position":
        seeds, positions = pairs * 1000003, torch.arange(N) % 2 + 100
    else:
        seeds, positions = torch.arange(N) % 2 + 77, pairs
    tokens = ops.sample(logits, 1.0, -1, 1.0, 0.0, seeds=seeds, positions=positions)
    first, second = tokens[0::2], tokens[1::2]
    assert (first != second).any()
    assert independence_p_value(first, second, vocab) > ALPHA
