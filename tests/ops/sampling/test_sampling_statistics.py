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

from stats import chi_square_p_value, independence_p_value
from strategies import DEVICE

from kunlun_triton.ops import sampling as ops
from kunlun_triton.ops.sampling import reference as ref

N = 4096
ALPHA = 1e-5


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
    logits = (torch.randn(1, vocab, generator=gen).to(DEVICE) * scale).expand(N, vocab).contiguous()
    if vary == "positions":
        seeds, positions = torch.full((N,), 20240607, device=DEVICE), torch.arange(N, device=DEVICE) * 3 + 1
    else:
        seeds, positions = torch.arange(N, device=DEVICE) + 17, torch.full((N,), 5, device=DEVICE)
    tokens = ops.sample(logits, temp, top_k, top_p, min_p, seeds=seeds, positions=positions)
    probs = ref.filtered_probs(
        logits[:1], torch.tensor([temp], device=DEVICE), torch.tensor([top_k if top_k > 0 else vocab], device=DEVICE),
        torch.tensor([top_p], device=DEVICE), torch.tensor([min_p], device=DEVICE),
    )[0]
    assert (probs[tokens] > 0).all(), "a token outside the allowed set was drawn"
    if name != "temperature-only":
        assert (probs > 0).sum() < vocab, "the case must actually filter"
    counts = torch.bincount(tokens, minlength=vocab)
    assert chi_square_p_value(counts, probs) > ALPHA


def test_draws_without_seeds_follow_the_distribution():
    vocab = 40
    logits = (torch.randn(1, vocab, generator=torch.Generator().manual_seed(1)).to(DEVICE) * 1.5).expand(N, vocab)
    tokens = ops.sample(logits.contiguous(), 1.0, 25, 0.95, 0.0, generator=torch.Generator().manual_seed(9))
    probs = ref.filtered_probs(logits[:1], torch.ones(1, device=DEVICE), torch.tensor([25], device=DEVICE), torch.tensor([0.95], device=DEVICE), torch.zeros(1, device=DEVICE))[0]
    assert (probs[tokens] > 0).all()
    assert chi_square_p_value(torch.bincount(tokens, minlength=vocab), probs) > ALPHA


@pytest.mark.parametrize("step", ["position", "seed"])
def test_neighbouring_draws_are_independent(step):
    """Draw i and draw i+1 differ only in position (or seed) by one; over N/2
    pairs the 6x6 contingency table shows no dependence."""
    vocab = 6
    logits = torch.tensor([[0.0, 0.3, -0.2, 0.5, 0.1, -0.4]], device=DEVICE).expand(N, vocab).contiguous()
    pairs = torch.arange(N, device=DEVICE) // 2
    if step == "position":
        seeds, positions = pairs * 1000003, torch.arange(N, device=DEVICE) % 2 + 100
    else:
        seeds, positions = torch.arange(N, device=DEVICE) % 2 + 77, pairs
    tokens = ops.sample(logits, 1.0, -1, 1.0, 0.0, seeds=seeds, positions=positions)
    first, second = tokens[0::2], tokens[1::2]
    assert (first != second).any()
    assert independence_p_value(first, second, vocab) > ALPHA
