"""SGLang 0.5.23's pytorch sampling path as a benchmark baseline and oracle.

``top_k_top_p_min_p_sampling_from_probs_torch`` (sglang/srt/layers/sampler.py)
is what SGLang runs with ``--sampling-backend pytorch``: softmax, a full sort,
cumsum, masks, then ``torch.multinomial`` (or its seeded Gumbel draw when
given per-request seeds). SGLang's Sampler divides by the temperatures and
takes the softmax first; this wrapper does the same so it takes logits like
`ops.sample`.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch


def sglang_torch_sample(logits, temperatures, top_ks, top_ps, min_ps, need_min_p, seeds=None, positions=None):
    """Token ids (int32, SGLang's dtype). `need_min_p` is SGLang's batch flag
    (any min_p > 0), computed once by the caller as SGLang does per batch;
    SGLang refuses min-p together with seeds."""
    probs = torch.softmax(logits.float() / temperatures.view(-1, 1), dim=-1)
    if positions is None and seeds is not None:
        positions = torch.zeros_like(seeds)
    return top_k_top_p_min_p_sampling_from_probs_torch(
        probs, top_ks, top_ps, min_ps, need_min_p, seeds, positions
    )


def sample_baseline(case):
    """SGLang's pytorch sampler on a `sample` bench case; `need_min_p` is
    computed once, as SGLang does per batch."""
    logits, temps, top_ks, top_ps, min_ps, _, _ = case.args
    need_min_p = bool((min_ps > 0).any())
    return lambda: sglang_torch_sample(logits, temps, top_ks, top_ps, min_ps, need_min_p)
