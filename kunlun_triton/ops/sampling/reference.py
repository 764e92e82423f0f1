"""Sampling in plain torch: the oracle for the kernels and the CPU fallback.

`filtered_probs` is the distribution a request samples from, in float64,
computed the way SGLang's pytorch backend does
(``top_k_top_p_min_p_sampling_from_probs_torch`` in
``sglang/srt/layers/sampler.py``): softmax of logits / temperature, sort
descending, then on the sorted row

    keep rank < top_k                          (top-k)
    and  cumsum(prob) - prob <= top_p           (top-p, on the same unfiltered
                                                 cumsum: SGLang's joint order)
    and  prob >= min_p * top prob               (min-p; the top token is never
                                                 removed by top-k/top-p)

and renormalise. The kept tokens are a prefix of the sorted row; we extend it
to every token tied with its last value, so the kept set depends on values
only, never on how a sort orders ties (SGLang's sort keeps an arbitrary
subset of a tie at the boundary; the kernels keep all of it).

A temperature above 2**126 (+inf included) acts as 2**126: every finite
logit of an ordinary row equally likely. Greedy rows (temperature 0 or top_k 1) put all mass on the argmax, ties to
the lowest token id. NaN logits count as -inf, +inf as the largest finite
float32. A row with no finite logit puts all mass on token 0.

`sample` draws from it with the same counter-based noise as the kernels
(`gumbel_noise`), so the fallback path is as reproducible as the kernel.
`sort_based_sample` is SGLang's own fp32 sort + cumsum + multinomial path,
the baseline `kunlun-triton bench` compares with.
"""

from __future__ import annotations

import torch

FLT_MAX = torch.finfo(torch.float32).max
_MASK32 = 0xFFFFFFFF


def _clean_logits(logits: torch.Tensor) -> torch.Tensor:
    x = logits.double()
    x = torch.where(torch.isnan(x), float("-inf"), x)
    return x.clamp(max=FLT_MAX)


def _no_top_k(top_ks: torch.Tensor, vocab: int) -> torch.Tensor:
    """top_k -1 (or anything past the vocabulary) keeps every token."""
    top_ks = top_ks.long()
    return torch.where((top_ks < 1) | (top_ks > vocab), vocab, top_ks)


def _keep_sorted_prefix(probs, top_ks, top_ps, min_ps, total, order=None):
    """Boolean [B, V] of kept tokens (ties at the boundary all kept), ranked
    by `order` (default: the probs themselves; `filtered_probs` ranks by the
    scaled logits, as the kernels rank by the logits' keys: at a huge
    temperature every prob rounds to the same value, the logits still
    differ)."""
    vocab = probs.shape[1]
    order = probs if order is None else order
    order_sort, idx = order.sort(dim=1, descending=True, stable=True)
    probs_sort = probs.gather(1, idx)
    mass_above = probs_sort.cumsum(dim=1) - probs_sort
    rank = torch.arange(vocab, device=probs.device).view(1, -1)
    keep = rank < _no_top_k(top_ks, vocab).view(-1, 1).to(probs.device)
    top_ps = top_ps.double().view(-1, 1).to(probs.device)
    keep &= (mass_above <= top_ps * total.view(-1, 1)) | (top_ps >= 1.0)
    keep &= probs_sort >= min_ps.double().view(-1, 1).to(probs.device) * probs_sort[:, :1]
    kept_len = keep.sum(dim=1).clamp(min=1)
    cut = order_sort.gather(1, (kept_len - 1).view(-1, 1))
    return order >= cut


def filtered_probs(logits, temperatures, top_ks, top_ps, min_ps) -> torch.Tensor:
    """The renormalised distribution each row samples from, float64 [B, V]."""
    x = _clean_logits(logits)
    # A temperature past 2**126 = 1 / FLT_MIN acts as 2**126, as in the
    # kernels: +inf (SGLang's fp32 of 1e308) would make -inf / inf = NaN.
    temperatures = temperatures.double().to(x.device).clamp(max=2.0**126)
    is_greedy = (temperatures == 0) | (top_ks.to(x.device) == 1)
    # float64 holds any fp32 logit over any fp32 temperature: no clamp after
    # the division (it would tie a huge finite logit with +inf).
    x = x / torch.where(is_greedy, 1.0, temperatures).view(-1, 1)
    valid = (x > float("-inf")).any(dim=1)
    probs = torch.softmax(torch.where(valid.view(-1, 1), x, 0.0), dim=1)
    total = torch.ones(x.shape[0], dtype=torch.float64, device=x.device)
    keep = _keep_sorted_prefix(probs, top_ks, top_ps, min_ps, total, order=torch.where(valid.view(-1, 1), x, 0.0))
    out = torch.where(keep, probs, 0.0)
    out = out / out.sum(dim=1, keepdim=True)
    one_hot = torch.zeros_like(out)
    one_hot.scatter_(1, greedy(logits).view(-1, 1).to(x.device), 1.0)
    return torch.where((is_greedy | ~valid).view(-1, 1), one_hot, out)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """argmax per row, ties to the lowest id, NaN never chosen; int64."""
    return torch.argmax(_clean_logits(logits), dim=1)


def renorm_probs(probs, top_ks, top_ps, min_ps) -> torch.Tensor:
    """`probs` restricted by top-k / top-p / min-p and renormalised, float64.

    NaN and negative entries count as 0; top-p is relative to the row's sum;
    a row with no positive entry comes out all zero.
    """
    p = probs.double()
    p = torch.where(p > 0, p, 0.0).clamp(max=FLT_MAX)
    keep = _keep_sorted_prefix(p, top_ks, top_ps, min_ps, p.sum(dim=1))
    out = torch.where(keep, p, 0.0)
    total = out.sum(dim=1, keepdim=True)
    return torch.where(total > 0, out / torch.where(total > 0, total, 1.0), 0.0)


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's finaliser on int64 tensors holding uint32 values."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def gumbel_noise(seeds: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise [B, V] in float64, a pure function of (seed,
    position, token id): ``g = -log(E)`` for the kernels' exponential noise
    ``E = -log(u)`` (the same hash, computed here in uint32 arithmetic), so
    ``argmax log p + g`` is the kernels' race ``argmax p / E``."""
    seeds = seeds.long().view(-1, 1)
    positions = positions.long().view(-1, 1).to(seeds.device)
    h = _fmix32((seeds & _MASK32) ^ 0x9E3779B9)
    h = _fmix32(h ^ ((seeds >> 32) & _MASK32))
    h = _fmix32(h ^ (positions & _MASK32))
    stream = _fmix32(h ^ ((positions >> 32) & _MASK32))
    cols = torch.arange(vocab, dtype=torch.int64, device=seeds.device).view(1, -1)
    h = _fmix32((stream + cols * 0x9E3779B9) & _MASK32)
    u = ((h >> 9).double() + 0.5) * 2.0**-23
    return -torch.log(-torch.log(u))


def sample(logits, temperatures, top_ks, top_ps, min_ps, seeds, positions) -> torch.Tensor:
    """Gumbel-max draw from `filtered_probs` with `gumbel_noise`; int64 [B]."""
    probs = filtered_probs(logits, temperatures, top_ks, top_ps, min_ps)
    noise = gumbel_noise(seeds.to(probs.device), positions, probs.shape[1])
    return torch.argmax(torch.log(probs) + noise, dim=1)


def sort_based_sample(logits, temperatures, top_ks, top_ps, min_ps, generator=None) -> torch.Tensor:
    """SGLang's pytorch sampling backend at working precision (fp32 sort,
    cumsum, multinomial): the baseline the kernels are benchmarked against."""
    is_greedy = (temperatures == 0) | (top_ks == 1)
    scaled = logits.float() / torch.where(is_greedy, 1.0, temperatures.float()).view(-1, 1)
    probs = torch.softmax(scaled, dim=-1)
    probs_sort, probs_idx = probs.sort(dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    rank = torch.arange(probs.shape[-1], device=probs.device).view(1, -1)
    probs_sort[rank >= top_ks.view(-1, 1)] = 0.0
    probs_sort[(probs_sum - probs_sort) > top_ps.view(-1, 1)] = 0.0
    probs_sort[probs_sort < (probs_sort[:, 0] * min_ps).view(-1, 1)] = 0.0
    picked = torch.multinomial(probs_sort, num_samples=1, generator=generator)
    return torch.gather(probs_idx, 1, picked).view(-1)


def tree_layout(parents, batch_offset: int = 0):
    """SGLang's draft-tree layout of one request from its nodes' parents
    (``parents[0] == -1``, the root; every other parent earlier in the
    list): (retrive_index, retrive_next_token, retrive_next_sibling) as
    int64 [D] tensors; children linked in node order, ``retrive_index`` the
    node's flat row ``batch_offset + i``."""
    count = len(parents)
    next_token, next_sibling = [-1] * count, [-1] * count
    last_child = {}
    for node in range(1, count):
        parent = parents[node]
        if parent in last_child:
            next_sibling[last_child[parent]] = node
        else:
            next_token[parent] = node
        last_child[parent] = node
    index = torch.arange(batch_offset, batch_offset + count, dtype=torch.int64)
    return index, torch.tensor(next_token, dtype=torch.int64), torch.tensor(next_sibling, dtype=torch.int64)


def tree_speculative_sampling_target_only(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token, retrive_next_sibling,
    uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs,
    threshold_single=1.0, threshold_acc=1.0, deterministic=True,
) -> None:  # fmt: skip
    """SGLang's target-only verification of draft trees, request by request
    on host values in float64 (the oracle; the op's docstring in
    `tree_kernels` states the rule). Writes `predicts`, `accept_index`,
    `accept_token_num` and the rejected entries of `draft_probs` in place,
    as SGLang's kernel does. The thresholds are compared as the fp32 values
    the kernel gets (threshold_acc at least 1e-9)."""
    t_single = float(torch.tensor(threshold_single, dtype=torch.float32))
    t_acc = max(float(torch.tensor(threshold_acc, dtype=torch.float32)), float(torch.tensor(1e-9, dtype=torch.float32)))
    spec = accept_index.shape[1]
    vocab = target_probs.shape[-1]
    for b in range(candidates.shape[0]):
        tokens, index = candidates[b].tolist(), retrive_index[b].tolist()
        first_child, sibling = retrive_next_token[b].tolist(), retrive_next_sibling[b].tolist()
        coins = uniform_samples[b].double().tolist()
        target = target_probs[b].double()
        draft = draft_probs[b].double().clone()
        node, path = 0, [index[0]]
        level_mass, coin = 0.0, coins[0]
        child = first_child[0] if spec > 1 else -1
        while child != -1:
            token = tokens[child]
            mass = float(target[node, token])
            level_mass += mass
            if mass > 0 and (coin < level_mass / t_acc or mass >= t_single):
                predicts[path[-1]] = token
                path.append(index[child])
                node, level_mass, coin = child, 0.0, coins[child]
                child = first_child[child] if len(path) < spec else -1
            else:
                draft[node, token] = mass
                draft_probs[b, node, token] = target_probs[b, node, token]
                child = sibling[child]
        accepted = len(path) - 1
        accept_index[b, : len(path)] = torch.tensor(path, dtype=accept_index.dtype)
        accept_token_num[b] = accepted
        residual = target[node] - (0.0 if accepted == spec - 1 else draft[node])
        residual = residual.clamp(min=0.0)
        cdf = residual.cumsum(0)
        u = float(uniform_samples_for_final_sampling[b]) * float(cdf[-1])
        hits = torch.nonzero((cdf > u) & (residual > 0)).flatten()
        positive = torch.nonzero(residual > 0).flatten()
        token = hits[0] if hits.numel() else (positive[-1] if positive.numel() else vocab - 1)
        predicts[path[-1]] = int(token)
