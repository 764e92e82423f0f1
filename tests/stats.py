"""Statistics the sampling tests share: Pearson chi-square tests of goodness
of fit and of independence (p-values from the regularised incomplete gamma)."""

from __future__ import annotations

import math

import torch

MIN_EXPECTED = 5.0  # chi-square cells with fewer expected draws are pooled


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit of integer `counts` to `probs` (float64, sums to 1).

    Categories expected fewer than MIN_EXPECTED times are pooled. Where even
    the pool is expected fewer times (a row whose tail holds 1e-5 of the
    mass), the chi-square approximation fails (one draw from it reads as
    p = 1e-18, a 1% event), so the pool is judged by its exact binomial upper
    tail instead and the rest by chi-square; the smaller p-value is returned.
    """
    counts, probs = counts.cpu(), probs.double().cpu()
    n = counts.sum()
    expected = probs * n
    big = expected >= MIN_EXPECTED
    rare_observed, rare_expected = counts[~big].sum().double(), expected[~big].sum()
    tail_p = 1.0
    if rare_expected < MIN_EXPECTED:
        tail_p = binomial_upper_tail(int(rare_observed), int(n), float(rare_expected / n))
        observed, expected = counts[big].double(), expected[big]
        if int(big.sum()) > 1:  # the pool's draws left out: the rest's own fit, rescaled to its draws
            expected = expected * observed.sum() / expected.sum()
    else:
        observed = torch.cat([counts[big].double(), rare_observed.view(1)])
        expected = torch.cat([expected[big], rare_expected.view(1)])
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    stat = ((observed - expected) ** 2 / expected).sum()
    dof = max(int(keep.sum()) - 1, 1)
    chi_p = torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), stat / 2).item()
    return min(chi_p, tail_p)


def binomial_upper_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exactly (log-space terms)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    i = torch.arange(k, dtype=torch.float64)
    log_terms = (torch.lgamma(torch.tensor(n + 1.0, dtype=torch.float64)) - torch.lgamma(i + 1) - torch.lgamma(n - i + 1)
                 + i * math.log(p) + (n - i) * math.log1p(-p))  # fmt: skip
    return max(0.0, 1.0 - torch.exp(log_terms).sum().item())


def independence_p_value(a: torch.Tensor, b: torch.Tensor, categories: int) -> float:
    """Chi-square test that paired draws a[i], b[i] are independent."""
    a, b = a.cpu(), b.cpu()
    table = torch.zeros(categories, categories, dtype=torch.float64)
    table.index_put_((a, b), torch.ones(len(a), dtype=torch.float64), accumulate=True)
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    stat = ((table - expected) ** 2 / expected).sum()
    dof = (categories - 1) ** 2
    return torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), stat / 2).item()
