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


# ---- `kunlun-triton tune` hook ----
# Lookup dims (ops/kv_cache.py, ops/attention/*.py): store_kv by (row_width,
# tokens), decode by (head_dim, group, batch), extend by (head_dim, group);
# context and prefix lengths are not lookup dims, so one representative
# length is tuned (`--shape context_len=...` etc. picks another). Every
# candidate runs through the public op and is checked against the reference.

SUM_TILE_CAP = 65536  # tl.sum formulation: BLOCK_M x BLOCK_N x BLOCK_D product values per program


def _decode_candidates(quick):
    from ._tuning import with_formulations, with_warps

    if quick:
        base = [{"BLOCK_N": 16, "TARGET_PROGRAMS": 4, "MAX_KV_SPLITS": 1},
                {"BLOCK_N": 32, "TARGET_PROGRAMS": 8, "MAX_KV_SPLITS": 2, "MIN_SPLIT_TOKENS": 32}]  # fmt: skip
    else:
        splits = ({"TARGET_PROGRAMS": 64, "MAX_KV_SPLITS": 16}, {"TARGET_PROGRAMS": 256, "MAX_KV_SPLITS": 16},
                  {"TARGET_PROGRAMS": 1024, "MAX_KV_SPLITS": 64})  # fmt: skip
        base = [{"BLOCK_N": n, **s} for n in (16, 32, 64) for s in splits]
    return with_warps(with_formulations(base), quick)


def _extend_candidates(quick, head_dim):
    import triton

    from ._tuning import formulations, with_formulations, with_warps

    pairs = ((16, 16), (32, 16)) if quick else (
        (8, 16), (8, 32), (8, 64), (16, 8), (16, 16), (16, 32), (32, 8), (32, 16), (32, 32),
        (64, 32), (64, 64), (128, 32), (128, 64))  # fmt: skip
    default_form = "dot" if "dot" in formulations() else "sum"  # what a candidate without the key runs

    def affordable(c):
        if c.get("formulation", default_form) == "dot":  # the op raises dot tiles below 16: a different config
            return c["BLOCK_M"] >= 16 and c["BLOCK_N"] >= 16
        # the sum formulation holds a [M, D, N] product
        return c["BLOCK_M"] * c["BLOCK_N"] * triton.next_power_of_2(head_dim) <= SUM_TILE_CAP

    return with_warps(with_formulations([{"BLOCK_M": m, "BLOCK_N": n} for m, n in pairs], keep=affordable), quick)


def _store_thunk(tokens, kv_heads, head_dim, dtype, config):
    from ._tuning import checked_thunk, device

    dev = device()
    slots = max(4 * tokens, 64)
    k = torch.randn(tokens, kv_heads, head_dim, device=dev, dtype=torch.float32).to(dtype)
    v = torch.randn(tokens, kv_heads, head_dim, device=dev, dtype=torch.float32).to(dtype)
    k_buffer = torch.zeros(slots, kv_heads, head_dim, device=dev, dtype=dtype)
    v_buffer = torch.zeros_like(k_buffer)
    loc = _slots(dev, slots, tokens, tokens)
    k_expected, v_expected = k_buffer.clone(), v_buffer.clone()
    store_kv_reference(k, v, k_expected, v_expected, loc)

    def check(_):
        if not (torch.equal(k_buffer, k_expected) and torch.equal(v_buffer, v_expected)):
            raise AssertionError(f"store_kv with {config} wrote the wrong slots or values")

    return checked_thunk(store_kv, "store_kv", config, lambda: store_kv(k, v, k_buffer, v_buffer, loc, check=False), check)


def _decode_thunk(batch, context, heads, dtype, config):
    from ...testing import assert_close
    from ._tuning import checked_thunk, device

    q_heads, kv_heads, head_dim = heads
    d = decode_batch([context] * batch, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, device=device())
    p, args = d.pool, d.args()
    expected = decode_attention_reference(d.q, p.k_buffer, p.v_buffer, p.kv_indptr, p.kv_indices, d.sm_scale)
    return checked_thunk(
        decode_attention, "decode_attention", config, lambda: decode_attention(*args, check=False),
        lambda out: assert_close(out, expected, scale=2, msg=f"decode_attention with {config}"),
    )  # fmt: skip


def _extend_thunk(batch, prefix, extend, heads, dtype, config):
    from ...testing import assert_close
    from ._tuning import checked_thunk, device

    q_heads, kv_heads, head_dim = heads
    e = extend_batch([prefix] * batch, [extend] * batch, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
                     dtype=dtype, device=device())  # fmt: skip
    p, args = e.pool, e.args()
    expected = extend_attention_reference(e.q_extend, e.k_extend, e.v_extend, p.k_buffer, p.v_buffer, e.qo_indptr,
                                          p.kv_indptr, p.kv_indices, e.sm_scale)  # fmt: skip
    return checked_thunk(
        extend_attention, "extend_attention", config, lambda: extend_attention(*args, check=False),
        lambda out: assert_close(out, expected, scale=2, msg=f"extend_attention with {config}"),
    )  # fmt: skip


def tune_space(preset, args):
    from ._tuning import grid, with_warps

    quick = getattr(args, "quick", False)
    dtype = run_dtype(torch.float16)
    heads = (4, 2, 64) if quick else (preset.num_heads, preset.num_kv_heads, preset.head_dim)
    q_heads, kv_heads, head_dim = heads
    group = q_heads // kv_heads
    tasks = []

    store = grid(TOKENS_PER_PROGRAM=(1, 16), MAX_BLOCK_C=(128,)) if quick else \
        grid(TOKENS_PER_PROGRAM=(1, 4, 16), MAX_BLOCK_C=(256, 1024, 4096))  # fmt: skip
    for tokens in shape_values(args, "store_tokens", [16] if quick else [1, 64, 4096]):
        tasks.append(("store_kv", {"row_width": kv_heads * head_dim, "tokens": tokens},
                      lambda c, t=tokens: _store_thunk(t, kv_heads, head_dim, dtype, c), with_warps(store, quick)))  # fmt: skip

    context = shape_values(args, "context_len", [64] if quick else [4096])[0]
    for batch in shape_values(args, "batch", [2] if quick else [1, 8, 32, 64]):
        tasks.append(("decode_attention", {"head_dim": head_dim, "group": group, "batch": batch},
                      lambda c, b=batch: _decode_thunk(b, context, heads, dtype, c), _decode_candidates(quick)))  # fmt: skip

    batch = shape_values(args, "extend_batch", [1] if quick else [4])[0]
    prefix = shape_values(args, "prefix_len", [16] if quick else [1024])[0]
    extend = shape_values(args, "extend_len", [32] if quick else [512])[0]
    tasks.append(("extend_attention", {"head_dim": head_dim, "group": group},
                  lambda c: _extend_thunk(batch, prefix, extend, heads, dtype, c), _extend_candidates(quick, head_dim)))  # fmt: skip
    return tasks
