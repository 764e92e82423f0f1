"""Pure-torch paged attention: the oracle for the Triton kernels and the CPU
fallback path.

Written plainly on purpose: per request, gather the request's keys and values
from the pool by slot id, then an explicit masked softmax in fp32:

    s[h, i, j] = sm_scale * <q[i, h], k[j, h // group]>
    s          = cap * tanh(s / cap)                     (when logit_cap > 0)
    visible    = key_pos[j] <= q_pos[i]                  (causal)
                 and q_pos[i] - key_pos[j] <= window     (when sliding_window > 0)
    o[i, h]    = sum over visible j of softmax_j(s)[j] * v[j]   (0 where nothing is visible)

With attention sinks (gpt-oss: `sinks` [Hq], one learned logit per query
head), the softmax's denominator gains the sink's term and the sink carries
no value:

    o[i, h] = sum_j e^(s_j - M) v[j] / (sum_j e^(s_j - M) + e^(sinks[h] - M)),
    M = max(max_j s_j, sinks[h])

written out below as one more score column per head whose value row is 0.

Hidden keys take no part, whatever their values: a NaN or inf in a key or
value the query cannot see (the causal future, beyond the window) never
reaches its output (0 * inf is NaN, so hidden keys are left out of the
weighted sum rather than weighted by 0), while a non-finite value the query
does see makes its output non-finite, as the arithmetic says.

`sliding_window` follows SGLang's `sliding_window_size` (window_left): a query
at position i sees keys i - window .. i, that is window + 1 tokens including
itself; None, 0 or a negative value means no window.
"""

from __future__ import annotations

import torch


FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def store_kv(k, v, k_buffer, v_buffer, out_cache_loc, k_scale=1.0, v_scale=1.0) -> None:
    """Write token t's K/V into slot out_cache_loc[t] of each pool (in place);
    an fp8 pool gets torch's cast of the fp32 k / k_scale (v / v_scale)."""
    loc = out_cache_loc.long()
    for x, buffer, scale in ((k, k_buffer, k_scale), (v, v_buffer, v_scale)):
        if buffer.dtype in FP8_DTYPES:  # index_put has no fp8 kernel: write the bytes
            buffer.view(torch.uint8)[loc] = (x.float() / scale).to(buffer.dtype).view(torch.uint8)
        else:
            buffer[loc] = x.to(buffer.dtype)


def dequantized(buffer, slots, scale=1.0):
    """Rows `slots` of a pool as values: an fp8 pool's bytes decoded by torch
    and times its scale, in fp32; any other pool as it is."""
    if buffer.dtype in FP8_DTYPES:
        return buffer.view(torch.uint8)[slots].view(buffer.dtype).float() * scale
    return buffer[slots]


def window_or_none(sliding_window) -> int | None:
    return sliding_window if sliding_window is not None and sliding_window > 0 else None


def attend(q, k, v, q_pos, k_pos, sm_scale, logit_cap=0.0, sliding_window=None, allowed=None,
           sinks=None) -> torch.Tensor:  # fmt: skip
    """Attention of queries `q` [m, Hq, D] over keys `k` [n, Hkv, D] and values
    `v` [n, Hkv, Dv] with positions `q_pos` [m], `k_pos` [n]; fp32 result [m, Hq, Dv].
    `allowed` [m, n] bool (a speculative tree's mask) further hides keys.
    `sinks` [Hq]: each head's sink logit joins its softmax (module docstring)."""
    if sinks is not None:
        return _attend_with_sinks(q, k, v, q_pos, k_pos, sm_scale, logit_cap, sliding_window, allowed, sinks)
    scores, visible, vf = _scores(q, k, v, q_pos, k_pos, sm_scale, logit_cap, sliding_window, allowed)
    scores = scores.masked_fill(~visible[None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    # rows with no visible key: softmax of all -inf is NaN; they output 0. (A
    # NaN score at a visible key keeps its row NaN: no nan_to_num.)
    probs = probs.masked_fill(~visible.any(-1)[None, :, None], 0.0)
    bad = ~torch.isfinite(vf).all(-1)  # [Hq, n]: values with an inf or NaN
    out = torch.matmul(probs, vf.masked_fill(bad[..., None], 0.0))
    if bad.any():  # the visible ones still count, hidden ones not even as 0 * inf
        cols = bad.any(0).nonzero().flatten()
        terms = probs[:, :, cols, None] * vf[:, None, cols, :]  # [Hq, m, bad keys, Dv]
        out = out + terms.masked_fill(~visible[None, :, cols, None], 0.0).sum(2)
    return out.transpose(0, 1)  # [m, Hq, Dv]


def _scores(q, k, v, q_pos, k_pos, sm_scale, logit_cap, sliding_window, allowed):
    """Per-head scores [Hq, m, n] (soft-capped), which keys each query sees
    [m, n] (causal, tree mask, window), and the values per head [Hq, n, Dv]."""
    group = q.shape[1] // k.shape[1]
    qf = q.float().transpose(0, 1)  # [Hq, m, D]
    kf = k.float().repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, n, D]
    vf = v.float().repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, n, Dv]
    scores = torch.matmul(qf, kf.transpose(1, 2)) * sm_scale  # [Hq, m, n]
    if logit_cap and logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    visible = k_pos[None, :] <= q_pos[:, None]
    if allowed is not None:
        visible &= allowed
    window = window_or_none(sliding_window)
    if window is not None:
        visible &= (q_pos[:, None] - k_pos[None, :]) <= window
    return scores, visible, vf


def _attend_with_sinks(q, k, v, q_pos, k_pos, sm_scale, logit_cap, sliding_window, allowed, sinks):
    """`attend` with a sink: the keys plus one extra key per head, always
    visible, whose score is sinks[h] whatever the query and whose value row
    is zeros. A row that sees no real key gets the sink alone: 0."""
    m, hq, n = q.shape[0], q.shape[1], k.shape[0]
    scores, visible, vf = _scores(q, k, v, q_pos, k_pos, sm_scale, logit_cap, sliding_window, allowed)
    sink_column = sinks.float().view(hq, 1, 1).expand(hq, m, 1)
    scores = torch.cat([scores.masked_fill(~visible[None], float("-inf")), sink_column], dim=2)  # [Hq, m, n + 1]
    probs = torch.softmax(scores, dim=-1)[..., :n]  # the sink's share is dropped with its zero value
    out = torch.zeros(hq, m, vf.shape[-1], dtype=torch.float32, device=q.device)
    for j in range(n):  # hidden keys left out of the sum, not weighted by 0 (0 * inf is NaN)
        term = probs[:, :, j, None] * vf[:, None, j, :]
        out += term.masked_fill(~visible[None, :, j, None], 0.0)
    return out.transpose(0, 1)  # [m, Hq, Dv]


def _slots(kv_indptr, kv_indices, b) -> torch.Tensor:
    start, end = int(kv_indptr[b]), int(kv_indptr[b + 1])
    return kv_indices[start:end].long()


def decode_attention(
    q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale, logit_cap=0.0, sliding_window=None, k_scale=1.0,
    v_scale=1.0, sinks=None,
) -> torch.Tensor:
    """One query per request; request b's keys are the slots
    kv_indices[kv_indptr[b]:kv_indptr[b+1]] (the query's own token last).
    Writes o [bs, Hq, Dv] (q's dtype) and returns it."""
    bs, hq = q.shape[0], q.shape[1]
    out = torch.zeros(bs, hq, v_buffer.shape[-1], dtype=torch.float32, device=q.device)
    for b in range(bs):
        slots = _slots(kv_indptr, kv_indices, b)
        n = slots.numel()
        if n == 0:
            continue
        k_pos = torch.arange(n, device=q.device)
        q_pos = torch.tensor([n - 1], device=q.device)
        out[b] = attend(
            q[b : b + 1], dequantized(k_buffer, slots, k_scale), dequantized(v_buffer, slots, v_scale), q_pos, k_pos,
            sm_scale, logit_cap, sliding_window, sinks=sinks,
        )[0]
    return o.copy_(out)


def extend_attention(
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    max_len_extend,
    sm_scale,
    logit_cap=0.0,
    sliding_window=None,
    k_scale=1.0,
    v_scale=1.0,
    custom_mask=None,
    mask_indptr=None,
    sinks=None,
) -> torch.Tensor:
    """Request b's new tokens q_extend[qo_indptr[b]:qo_indptr[b+1]] attend to its
    cached prefix (pool slots kv_indices[kv_indptr[b]:kv_indptr[b+1]]) and
    causally to the new tokens' own k_extend/v_extend rows. Writes o_extend
    [tokens, Hq, Dv] (q's dtype) and returns it; `max_len_extend` is unused
    (it sizes the kernel's grid).

    With `custom_mask` (target verify of a draft tree; SGLang's layout):
    request b's E x (P + E) row-major block starts at custom_mask[mask_indptr[b]];
    new token m sees new token n only where block[m, P + n] is nonzero (and
    n <= m); the prefix columns are not read: every new token sees the whole
    prefix (SGLang's skip_prefix_custom_mask=True, as its TARGET_VERIFY runs)."""
    total, hq = q_extend.shape[0], q_extend.shape[1]
    out = torch.zeros(total, hq, v_extend.shape[-1], dtype=torch.float32, device=q_extend.device)
    for b in range(qo_indptr.numel() - 1):
        q0, q1 = int(qo_indptr[b]), int(qo_indptr[b + 1])
        if q1 == q0:
            continue
        slots = _slots(kv_indptr, kv_indices, b)
        prefix = slots.numel()
        k_prefix, v_prefix = dequantized(k_buffer, slots, k_scale), dequantized(v_buffer, slots, v_scale)
        k = torch.cat([k_prefix, k_extend[q0:q1].to(k_prefix.dtype)])
        v = torch.cat([v_prefix, v_extend[q0:q1].to(v_prefix.dtype)])
        k_pos = torch.arange(prefix + q1 - q0, device=q_extend.device)
        q_pos = k_pos[prefix:]
        allowed = None
        if custom_mask is not None:
            n = q1 - q0
            start = int(mask_indptr[b])
            block = custom_mask[start : start + n * (prefix + n)].view(n, prefix + n) != 0
            allowed = torch.cat([torch.ones(n, prefix, dtype=torch.bool, device=block.device), block[:, prefix:]], 1)
        out[q0:q1] = attend(q_extend[q0:q1], k, v, q_pos, k_pos, sm_scale, logit_cap, sliding_window, allowed, sinks)
    return o_extend.copy_(out)


def extend_attention_unified(q_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, sm_scale,
                             logit_cap=0.0, sliding_window=None, k_scale=1.0, v_scale=1.0,
                             sinks=None) -> torch.Tensor:  # fmt: skip
    """`extend_attention` with ``unified_kv``: request b's slots
    kv_indices[kv_indptr[b]:kv_indptr[b+1]] are its whole sequence, the new
    tokens (rows qo_indptr[b]:qo_indptr[b+1] of q_extend) its last ones."""
    total, hq = q_extend.shape[0], q_extend.shape[1]
    out = torch.zeros(total, hq, v_buffer.shape[-1], dtype=torch.float32, device=q_extend.device)
    for b in range(qo_indptr.numel() - 1):
        q0, q1 = int(qo_indptr[b]), int(qo_indptr[b + 1])
        if q1 == q0:
            continue
        slots = _slots(kv_indptr, kv_indices, b)
        k_pos = torch.arange(slots.numel(), device=q_extend.device)
        q_pos = k_pos[slots.numel() - (q1 - q0):]
        k, v = dequantized(k_buffer, slots, k_scale), dequantized(v_buffer, slots, v_scale)
        out[q0:q1] = attend(q_extend[q0:q1], k, v, q_pos, k_pos, sm_scale, logit_cap, sliding_window, sinks=sinks)
    return o_extend.copy_(out)


def build_kv_indices(req_to_token, req_pool_indices, seq_lens, kv_indptr, kv_indices):
    """kv_indptr = [0, cumsum(seq_lens)]; request b's first seq_lens[b] ids of
    table row req_pool_indices[b], packed into kv_indices (in place)."""
    lens = [int(n) for n in seq_lens]
    kv_indptr[0] = 0
    start = 0
    for b, n in enumerate(lens):
        kv_indices[start : start + n] = req_to_token[int(req_pool_indices[b]), :n].to(kv_indices.dtype)
        start += n
        kv_indptr[b + 1] = start
    return kv_indptr, kv_indices
