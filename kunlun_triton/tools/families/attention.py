"""Paged attention family: store_kv, decode_attention, extend_attention.

Bench cases share one KV pool per (device, dtype, head shape), sized for the
largest case, so a grid up to batch 64 x 32k context holds one pool, not one
per case. A request's slots are a random permutation of the pool's (SGLang's
page_size=1 layout, the least friendly to the memory system). Bytes moved
are what an ideal kernel reads and writes once: every visible K and V row
plus q and o (decode); prefix K/V, new q/k/v and o (extend).
Implementations: "triton" (the public op, checked mode off, as a server runs
it), "torch" (the reference, only where it is affordable) and "sglang"
(SGLang's own Triton kernels, when sglang is installed).
"""

from __future__ import annotations

import functools

import torch

from ...ops import decode_attention, extend_attention, store_kv
from ...reference.attention import decode_attention_reference, extend_attention_reference, store_kv_reference
from ...runtime import run_dtype
from ...testing.paged import decode_batch, extend_batch
from ..checks import BenchCase, OpCheck
from ..presets import shape_values
from . import sglang_baseline

FAMILY = "attention"
TORCH_REFERENCE_MAX_TOKENS = 64 * 1024  # the per-request python loop is slow beyond this


def doctor_checks(device) -> list[OpCheck]:
    dtype = run_dtype(torch.float16)
    checks = []

    def store_case():
        gen = torch.Generator().manual_seed(0)
        k = torch.randn(5, 2, 64, generator=gen).to(dtype).to(device)
        v = torch.randn(5, 2, 64, generator=gen).to(dtype).to(device)
        loc = torch.tensor([7, 0, 3, 12, 9], device=device)
        return k, v, torch.zeros(16, 2, 64, dtype=dtype, device=device), loc

    def run_store():
        k, v, buf, loc = store_case()
        kb, vb = buf, buf.clone()
        store_kv(k, v, kb, vb, loc)
        return kb, vb

    def ref_store():
        k, v, buf, loc = store_case()
        kb, vb = buf, buf.clone()
        store_kv_reference(k, v, kb, vb, loc)
        return kb, vb

    checks.append(OpCheck("store_kv", run_store, ref_store, dtype=dtype))

    d = decode_batch([37, 1, 100], q_heads=8, kv_heads=2, head_dim=128, dtype=dtype, device=device, page_size=16)
    p = d.pool
    checks.append(OpCheck(
        "decode_attention",
        lambda: decode_attention(*d.args()),
        lambda: decode_attention_reference(d.q, p.k_buffer, p.v_buffer, p.kv_indptr, p.kv_indices, d.sm_scale),
        dtype=dtype,
    ))
    e = extend_batch([20, 0], [9, 24], q_heads=8, kv_heads=2, head_dim=128, dtype=dtype, device=device, page_size=16)
    ep = e.pool
    checks.append(OpCheck(
        "extend_attention",
        lambda: extend_attention(*e.args()),
        lambda: extend_attention_reference(e.q_extend, e.k_extend, e.v_extend, ep.k_buffer, ep.v_buffer, e.qo_indptr,
                                           ep.kv_indptr, ep.kv_indices, e.sm_scale),
        dtype=dtype,
    ))
    return checks


@functools.lru_cache(maxsize=2)
def _pool(device: str, dtype: torch.dtype, slots: int, kv_heads: int, head_dim: int):
    gen = torch.Generator(device=device).manual_seed(0)
    make = lambda: torch.randn(slots, kv_heads, head_dim, generator=gen, device=device, dtype=torch.float32 if device == "cpu" else dtype).to(dtype)  # noqa: E731
    return make(), make()


def _slots(device, slots_in_pool, count, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randperm(slots_in_pool, generator=gen, device=device)[:count].to(torch.int32)


def _indptr(lens, device):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)


def bench_cases(preset, args):
    from ...runtime import current_target

    device = current_target().device_type
    dtype = run_dtype(torch.float16)
    elt = torch.empty(0, dtype=dtype).element_size()
    quick = getattr(args, "quick", False)
    kv_heads, q_heads, head_dim = preset.num_kv_heads, preset.num_heads, preset.head_dim
    if quick:
        kv_heads, q_heads, head_dim = 2, 8, 64
    batches = shape_values(args, "batch", [1, 2] if quick else [1, 8, 32, 64])
    contexts = shape_values(args, "context_len", [64, 256] if quick else [1024, 4096, 16384, 32768])
    ext_batches = shape_values(args, "extend_batch", [1, 2] if quick else [1, 8])
    prefixes = shape_values(args, "prefix_len", [0, 64] if quick else [0, 4096])
    extends = shape_values(args, "extend_len", [32] if quick else [512, 2048])
    pool_slots = max(max(batches) * max(contexts), max(ext_batches) * max(prefixes), 1)
    sglang = sglang_baseline("attention")
    sm_scale = head_dim**-0.5
    gen = torch.Generator(device=device).manual_seed(1)

    for batch in batches:
        for context in contexts:
            k_buffer, v_buffer = _pool(device, dtype, pool_slots, kv_heads, head_dim)
            lens = [context] * batch
            indptr, indices = _indptr(lens, device), _slots(device, pool_slots, batch * context, batch + context)
            q = torch.randn(batch, q_heads, head_dim, generator=gen, device=device, dtype=torch.float32).to(dtype)
            o = torch.empty_like(q)
            impls = {"triton": functools.partial(decode_attention, q, k_buffer, v_buffer, o, indptr, indices, sm_scale, check=False)}
            if quick or batch * context <= TORCH_REFERENCE_MAX_TOKENS:
                impls["torch"] = functools.partial(decode_attention_reference, q, k_buffer, v_buffer, indptr, indices, sm_scale)
            if sglang is not None:
                impls["sglang"] = sglang.sglang_decode(q, k_buffer, v_buffer, torch.empty_like(o), indptr, indices, sm_scale)
            kv_bytes = batch * context * kv_heads * 2 * head_dim * elt
            yield BenchCase(FAMILY, "decode_attention", {"batch": batch, "context_len": context}, impls,
                            bytes_moved=kv_bytes + 2 * q.numel() * elt,
                            flops=4 * batch * context * q_heads * head_dim, x_axis="context_len")

    for batch in ext_batches:
        for prefix in prefixes:
            for extend in extends:
                k_buffer, v_buffer = _pool(device, dtype, pool_slots, kv_heads, head_dim)
                indptr = _indptr([prefix] * batch, device)
                indices = _slots(device, pool_slots, batch * prefix, batch + prefix)
                tokens = batch * extend
                rand = lambda h: torch.randn(tokens, h, head_dim, generator=gen, device=device, dtype=torch.float32).to(dtype)  # noqa: E731
                q, k, v = rand(q_heads), rand(kv_heads), rand(kv_heads)
                o = torch.empty_like(q)
                qo = _indptr([extend] * batch, device)
                args_ = (q, k, v, o, k_buffer, v_buffer, qo, indptr, indices, extend, sm_scale)
                impls = {"triton": functools.partial(extend_attention, *args_, check=False)}
                if quick or batch * (prefix + extend) <= TORCH_REFERENCE_MAX_TOKENS // 8:
                    impls["torch"] = functools.partial(extend_attention_reference, q, k, v, k_buffer, v_buffer, qo,
                                                       indptr, indices, sm_scale)
                if sglang is not None:
                    impls["sglang"] = sglang.sglang_extend(q, k, v, torch.empty_like(o), *args_[4:])
                moved = (batch * prefix * kv_heads * 2 + tokens * (2 * q_heads + 2 * kv_heads)) * head_dim * elt
                causal_pairs = batch * (extend * prefix + extend * (extend + 1) // 2)
                yield BenchCase(FAMILY, "extend_attention", {"batch": batch, "prefix_len": prefix, "extend_len": extend},
                                impls, bytes_moved=moved, flops=4 * causal_pairs * q_heads * head_dim, x_axis="prefix_len")

    for tokens in shape_values(args, "store_tokens", [16] if quick else [1, 64, 4096]):
        k_buffer, v_buffer = _pool(device, dtype, pool_slots, kv_heads, head_dim)
        k = torch.randn(tokens, kv_heads, head_dim, device=device, dtype=torch.float32).to(dtype)
        loc = _slots(device, pool_slots, tokens, tokens)
        impls = {"triton": functools.partial(store_kv, k, k, k_buffer, v_buffer, loc, check=False),
                 "torch": functools.partial(store_kv_reference, k, k, k_buffer, v_buffer, loc)}
        yield BenchCase(FAMILY, "store_kv", {"store_tokens": tokens}, impls, bytes_moved=4 * k.numel() * elt, x_axis="store_tokens")
