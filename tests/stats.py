"""Statistics the sampling tests share: Pearson chi-square tests of goodness
of fit and of independence (p-values from the regularised incomplete gamma)."""

from __future__ import annotations

import torch

MIN_EXPECTED = 5.0  # chi-square cells with fewer expected draws are pooled


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit of integer `counts` to `probs` (float64, sums to 1)."""
    counts, probs = counts.cpu(), probs.double().cpu()
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
    a, b = a.cpu(), b.cpu()
    table = torch.zeros(categories, categories, dtype=torch.float64)
    table.index_put_((a, b), torch.ones(len(a), dtype=torch.float64), accumulate=True)
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    stat = ((table - expected) ** 2 / expected).sum()
    dof = (categories - 1) ** 2
    return torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), stat / 2).item()
