"""SGLang 0.5.23's own Triton paged attention, called with our op signatures
so benchmarks and comparison tests run it on the same inputs.

Importing this module imports sglang (ImportError when absent). SGLang's
decode takes preallocated split scratch and a per-request split count; the
`sglang_decode` factory allocates them once (as SGLang's backend does) with
every request at `max_kv_splits` (SGLang's default
``--triton-attention-num-kv-splits`` is 8). KV scales are 1 (no fp8 KV).
"""

from __future__ import annotations

import torch
from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

SGLANG_DEFAULT_KV_SPLITS = 8


def sglang_decode(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale, logit_cap=0.0,
                  max_kv_splits: int = SGLANG_DEFAULT_KV_SPLITS):
    """A no-argument callable running SGLang's decode_attention_fwd into `o`."""
    batch, heads = q.shape[0], q.shape[1]
    logits = torch.empty(batch, heads, max_kv_splits, v_buffer.shape[-1], dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, heads, max_kv_splits, dtype=torch.float32, device=q.device)
    splits = torch.full((batch,), max_kv_splits, dtype=torch.int32, device=q.device)

    def run():
        decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, logits, lse, splits, max_kv_splits,
                             sm_scale, 1.0, 1.0, logit_cap=logit_cap)
        return o

    return run


def sglang_extend(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                  max_len_extend, sm_scale, logit_cap=0.0, sliding_window=None):
    """A no-argument callable running SGLang's extend_attention_fwd (causal,
    no custom mask) into `o_extend`. `sliding_window` is SGLang's
    sliding_window_size."""
    window = sliding_window if sliding_window and sliding_window > 0 else -1

    def run():
        extend_attention_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
                             kv_indices, None, True, None, max_len_extend, 1.0, 1.0, sm_scale=sm_scale,
                             logit_cap=logit_cap, sliding_window_size=window)
        return o_extend

    return run


def decode_baseline(case):
    """SGLang's decode on a `decode_attention` bench case (its own output buffer)."""
    q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale = case.args[:7]
    return sglang_decode(q, k_buffer, v_buffer, torch.empty_like(o), kv_indptr, kv_indices, sm_scale)


def extend_baseline(case):
    """SGLang's extend on an `extend_attention` bench case (its own output buffer)."""
    q, k, v, o, *rest = case.args
    return sglang_extend(q, k, v, torch.empty_like(o), *rest)
