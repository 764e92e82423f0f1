"""Attention sinks: ours against SGLang 0.5.23's own Triton decode and extend
kernels (run under the interpreter on CPU), called as its Triton backend
calls them for gpt-oss: `sinks` [q_heads] (bf16, as gpt-oss keeps them for
that backend), a sliding-window layer's decode over the window's slots only
(its backend's window_kv_indices) where ours takes the whole request and
`sliding_window`, extend with `sliding_window_size` over the whole prefix.
fp16 compute: SGLang's bf16 tl.dot is garbage under the interpreter (its
output off by 1e8 with or without sinks), ours upcasts there. Pools in the
compute dtype only: over an fp8 pool SGLang casts q and the weights to fp8
for its dots (row errors of 0.17 (e4m3) and 0.3 (e5m2) of the row's largest
output with no sink at all), so there our fp8 pools are checked against the
reference (test_attention_sinks.py). q is scaled so that scores reach ~15:
a sink of 20 then takes most, not all, of the weight (outputs ~1e-2, not
fp16's underflowed 1e-8). Collected only where SGLang is installed (see
tests/conftest.py)."""

import pytest
import torch
from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

from strategies import DEVICE

from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.ops import decode_attention, extend_attention
from kunlun_triton.testing import assert_close

SINKS = [(-1e4, 0.0), (0.0, 1.0), (12.0, 2.0), (20.0, 0.5)]  # (level, spread over the heads)
Q_SCALE = 6.0


def sinks_for(q_heads, level, spread, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (level + spread * torch.randn(q_heads, generator=gen)).to(torch.bfloat16).to(DEVICE)


def sglang_decode(q, k_buffer, v_buffer, kv_indptr, kv_indices, sm_scale, sinks, max_kv_splits, k_scale=1.0,
                  v_scale=1.0):  # fmt: skip
    """SGLang's decode with `max_kv_splits` splits asked of every request
    (short requests leave splits empty; its stage 2 skips them)."""
    batch, heads, v_dim = q.shape[0], q.shape[1], v_buffer.shape[-1]
    o = torch.empty(batch, heads, v_dim, dtype=q.dtype, device=q.device)
    logits = torch.empty(batch, heads, max_kv_splits, v_dim, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, heads, max_kv_splits, dtype=torch.float32, device=q.device)
    splits = torch.full((batch,), max_kv_splits, dtype=torch.int32, device=q.device)
    decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices.to(torch.int64), logits, lse, splits,
                         max_kv_splits, sm_scale, k_scale, v_scale, sinks=sinks)  # fmt: skip
    return o


def window_rail(kv_indptr, kv_indices, window):
    """SGLang's window_kv_indptr / window_kv_indices of a decode step: each
    request's last window + 1 slots."""
    starts, ends = kv_indptr[:-1].tolist(), kv_indptr[1:].tolist()
    rows = [kv_indices[max(s, e - window - 1) : e] for s, e in zip(starts, ends)]
    indptr = torch.tensor([0] + [len(r) for r in rows], device=kv_indptr.device).cumsum(0).to(kv_indptr.dtype)
    return indptr, torch.cat(rows)


@pytest.mark.parametrize("window", [None, 6, 200])
@pytest.mark.parametrize("level, spread", SINKS)
def test_decode_sinks_match_sglang(level, spread, window):
    b = decode_batch([37, 1, 64, 0], q_heads=8, kv_heads=2, head_dim=64, dtype=torch.float16, page_size=16, seed=11,
                     device=DEVICE)  # fmt: skip
    b.q.mul_(Q_SCALE)
    sinks = sinks_for(8, level, spread)
    q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale = b.args()
    ours = decode_attention(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale, sliding_window=window,
                            num_kv_splits=4, sinks=sinks)  # fmt: skip
    indptr, indices = window_rail(kv_indptr, kv_indices, window) if window else (kv_indptr, kv_indices)
    theirs = sglang_decode(q, k_buffer, v_buffer, indptr, indices, sm_scale, sinks, 4)
    assert_close(ours[:3], theirs[:3], scale=2)
    # a request without keys: ours writes zeros; SGLang's merge divides 0 by e^(sink - -inf) = inf: 0 too
    assert torch.equal(ours[3].float(), theirs[3].float().nan_to_num()) and not bool(ours[3].any())


@pytest.mark.parametrize("window", [None, 9, 500])
@pytest.mark.parametrize("level, spread", SINKS)
def test_extend_sinks_match_sglang(level, spread, window):
    e = extend_batch([20, 0, 7], [9, 16, 1], q_heads=8, kv_heads=2, head_dim=64, dtype=torch.float16, page_size=16,
                     seed=13, sliding_window=window, device=DEVICE)  # fmt: skip
    e.q_extend.mul_(Q_SCALE)
    sinks = sinks_for(8, level, spread, seed=1)
    args = e.args()
    ours = extend_attention(*args, sliding_window=window, sinks=sinks)
    q, k, v, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, max_len, sm_scale = args
    theirs = torch.empty_like(ours)
    extend_attention_fwd(q, k, v, theirs, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, None, True, None,
                         max_len, 1.0, 1.0, sm_scale=sm_scale,
                         sliding_window_size=window or -1, sinks=sinks)  # fmt: skip
    assert_close(ours, theirs, scale=2)
