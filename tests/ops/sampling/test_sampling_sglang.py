"""The reference's semantics against SGLang's own pytorch sampler.

SGLang 0.5.23's ``top_k_top_p_min_p_sampling_from_probs_torch`` draws with
torch.multinomial; over N draws from one row its empirical distribution must
fit our float64 reference (chi-square, false-failure rate ALPHA per case) and
never leave the reference's support. That pins the filter order (joint top-k
and top-p on the unfiltered cumsum, then min-p against the top prob), which
the kernel tests then check the kernels against. Collected only where SGLang
is installed (see tests/conftest.py).
"""

import pytest
import torch

from stats import chi_square_p_value

from kunlun_triton.ops.sampling import reference as ref
from kunlun_triton.sglang_plugin.tools.baselines import sampling as baseline

N = 8192
ALPHA = 1e-5


@pytest.mark.parametrize(
    "temp, top_k, top_p, min_p",
    [(0.8, 15, 0.7, 0.0), (1.0, 60, 0.95, 0.1), (1.3, 1000, 0.5, 0.0), (0.6, 8, 1.0, 0.3)],
)
def test_sglang_torch_sampler_follows_the_reference(temp, top_k, top_p, min_p):
    vocab = 97
    row = 2 * torch.randn(1, vocab, generator=torch.Generator().manual_seed(top_k))
    logits = row.expand(N, vocab).contiguous()
    full = lambda v, dtype=torch.float32: torch.full((N,), v, dtype=dtype)  # noqa: E731
    torch.manual_seed(0)
    tokens = baseline.sglang_torch_sample(
        logits, full(temp), full(top_k, torch.int64), full(top_p), full(min_p), min_p > 0
    ).long()
    probs = ref.filtered_probs(
        row, torch.tensor([temp]), torch.tensor([top_k]), torch.tensor([top_p]), torch.tensor([min_p])
    )[0]
    assert (probs[tokens] > 0).all()
    assert chi_square_p_value(torch.bincount(tokens, minlength=vocab), probs) > ALPHA
