"""Specs of the paged attention ops for doctor, bench and tune (see `ops.spec`).

A request's slots are scattered over the pool (SGLang's page_size=1 layout,
the least friendly to the memory system). Bytes moved are what an ideal
kernel reads and writes once: every visible K and V row plus q and o
(decode); prefix K/V, new q/k/v and o (extend). The op runs with checked
mode off, as a server runs it. The pool holds the model's dtype or fp8
(the shapes' ``kv_dtype``, `kv_dtype.py`): cached K/V count at its width.
"""

from __future__ import annotations

import torch

from ...introspect.paged import decode_batch, extend_batch
from ..spec import COUNT, FLAG, FORMULATION, NON_NEGATIVE, TILE, OpCase, OpSpec, baselines
from . import reference
from .decode_attention import decode_attention
from .decode_splits import DecodeWorkspace, decode_split_plan, decode_traffic, decode_workspace
from .extend_attention import extend_attention
from .kv_dtype import elt as _elt
from .kv_dtype import kv_scales, pool_dtype, quantize_pool
from .kv_dtype import meta as _meta
from .kv_dtype import meta_kv_pool as _kv_pool
from .kv_indices import build_kv_indices
from .store_kv import store_kv
from .tune_space import decode_candidates, extend_candidates, extend_keep, store_kv_candidates

# Exported by `kunlun_triton.ops` next to the ops: a decode step's split-KV
# scratch and plan, and its paged metadata built on the device.
HELPERS = (decode_workspace, DecodeWorkspace, decode_split_plan, build_kv_indices)

TORCH_REFERENCE_MAX_TOKENS = 64 * 1024  # the per-request python loop is slow beyond this


def store_kv_case(shape, dtype, device) -> OpCase:
    tokens, kv_heads, head_dim = shape["tokens"], shape["kv_heads"], shape["head_dim"]
    gen = torch.Generator().manual_seed(tokens)
    k = torch.randn(tokens, kv_heads, head_dim, generator=gen).to(dtype).to(device)
    v = torch.randn(tokens, kv_heads, head_dim, generator=gen).to(dtype).to(device)
    slots = shape.get("slots", max(4 * tokens, 16))
    loc = torch.randperm(slots, generator=gen)[:tokens].to(device)
    k_buffer = torch.zeros(slots, kv_heads, head_dim, dtype=pool_dtype(shape, dtype), device=device)
    v_buffer = torch.zeros_like(k_buffer)
    scales = kv_scales(shape)  # kv_dtype=fp8_*: the pool takes value / scale

    def run(config):
        store_kv(k, v, k_buffer, v_buffer, loc, check=False, config=config, **scales)
        return k_buffer, v_buffer

    def ref():
        reference.store_kv(k, v, k_buffer, v_buffer, loc, **scales)
        return k_buffer, v_buffer

    return OpCase(run, ref, {"row_width": kv_heads * head_dim, "tokens": tokens},
                  bytes_moved=2 * k.numel() * (_elt(dtype) + _elt(k_buffer.dtype)),  # read k, v; write the pool
                  args=(k, v, k_buffer, v_buffer, loc))  # fmt: skip


def decode_attention_case(shape, dtype, device) -> OpCase:
    lens = shape.get("lens") or [shape["context_len"]] * shape["batch"]
    head_dim = shape["head_dim"]
    v_dim = shape.get("v_head_dim", head_dim)
    d = decode_batch(lens, q_heads=shape["q_heads"], kv_heads=shape["kv_heads"], head_dim=head_dim,
                     dtype=dtype, device=device, page_size=shape.get("page_size", 1))  # fmt: skip
    if v_dim < head_dim:  # MLA: V is the latent part of K's rows, as SGLang's pool hands it over
        d.pool.v_buffer = d.pool.k_buffer[..., :v_dim]
    elif v_dim != head_dim:
        raise ValueError(f"decode_attention: v_head_dim {v_dim} above head_dim {head_dim} is not a shape it benches")
    quantize_pool(d.pool, shape, dtype)  # kv_dtype=fp8_*: the pool's bytes, read with `scales`
    scales = {**kv_scales(shape), **_sinks_kwargs(shape, device)}
    args = d.args()
    total = sum(lens)
    step = (len(lens), shape["q_heads"], shape["kv_heads"], head_dim, v_dim, device)
    workspace = decode_workspace(*step)  # once per decode step, as SGLang's backend makes it

    def run(config):
        ws = workspace if config is None else decode_workspace(*step, config=config)
        return decode_attention(*args, check=False, workspace=ws, config=config, **scales)

    return OpCase(
        run=run,
        reference=lambda: reference.decode_attention(*d.args(), **scales),
        # no batch: no constexpr may depend on it (the split policy scales with it at run time)
        dims={"head_dim": shape["head_dim"], "group": shape["q_heads"] // shape["kv_heads"]},
        bytes_moved=total * shape["kv_heads"] * (head_dim if v_dim < head_dim else 2 * head_dim)
        * _elt(d.pool.k_buffer.dtype) + (d.q.numel() + len(lens) * shape["q_heads"] * v_dim) * _elt(dtype),
        flops=4 * total * shape["q_heads"] * shape["head_dim"],
        args=args,
        time_reference=total <= TORCH_REFERENCE_MAX_TOKENS,
    )


def _sinks_kwargs(shape, device, meta=False) -> dict:
    """``sinks=1`` in a shape (gpt-oss's attention sinks): one fp32 logit per
    query head, drawn around 0 (`ops.attention.reference`)."""
    if not shape.get("sinks"):
        return {}
    if meta:
        return {"sinks": _meta(shape["q_heads"], dtype=torch.float32)}
    gen = torch.Generator().manual_seed(shape["q_heads"])
    return {"sinks": torch.randn(shape["q_heads"], generator=gen).to(device)}


def verify_mask(prefix, extend, device, meta=False):
    """Target verify's (custom_mask, mask_indptr) for an extend shape with
    ``custom_mask=1``: request b's E x (P + E) block (SGLang's layout), each
    draft token seeing its ancestors and itself in a tree of fan-out 2
    (parent of token i: (i - 1) // 2); the prefix columns set, as SGLang's
    tree builder fills them. On the meta device: shapes only."""
    sizes = [e * (p + e) for p, e in zip(prefix, extend)]
    starts = torch.tensor([0] + sizes).cumsum(0).to(torch.int64)
    if meta:
        return _meta(sum(sizes), dtype=torch.bool), _meta(len(sizes) + 1, dtype=torch.int64)
    blocks = []
    for p, e in zip(prefix, extend):
        tree = torch.eye(e, dtype=torch.bool)
        for i in range(1, e):
            tree[i] |= tree[(i - 1) // 2]
        blocks.append(torch.cat([torch.ones(e, p, dtype=torch.bool), tree], 1).flatten())
    mask = torch.cat(blocks) if blocks else torch.zeros(0, dtype=torch.bool)
    return mask.to(device), starts.to(device)


def _mask_kwargs(shape, prefix, extend, device, meta=False) -> dict:
    if not shape.get("custom_mask"):
        return {}
    mask, starts = verify_mask(prefix, extend, device, meta)
    return {"custom_mask": mask, "mask_indptr": starts}


def extend_attention_case(shape, dtype, device) -> OpCase:
    prefix = shape.get("prefix_lens") or [shape["prefix_len"]] * shape["batch"]
    extend = shape.get("extend_lens") or [shape["extend_len"]] * shape["batch"]
    q_heads, kv_heads, head_dim = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    v_dim = shape.get("v_head_dim", head_dim)
    e = extend_batch(prefix, extend, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_dim,
                     dtype=dtype, device=device, page_size=shape.get("page_size", 1))  # fmt: skip
    if v_dim < head_dim:  # MLA: V is the latent part of K's rows (pool and new tokens), as SGLang's plugin passes it
        e.pool.v_buffer, e.v_extend = e.pool.k_buffer[..., :v_dim], e.k_extend[..., :v_dim]
    elif v_dim != head_dim:
        raise ValueError(f"extend_attention: v_head_dim {v_dim} above head_dim {head_dim} is not a shape it benches")
    quantize_pool(e.pool, shape, dtype)  # kv_dtype=fp8_*: the cached prefix's bytes; new tokens stay in dtype
    scales = {**kv_scales(shape), **_sinks_kwargs(shape, device)}
    v_row = 0 if v_dim < head_dim else v_dim
    args = e.args()
    tokens = sum(e.extend_lens)
    cached = sum(e.pool.lens)
    causal_pairs = sum(n * p + n * (n + 1) // 2 for p, n in zip(e.pool.lens, e.extend_lens))
    masks = _mask_kwargs(shape, prefix, extend, device)  # target verify: ``custom_mask=1``
    return OpCase(
        run=lambda config: extend_attention(*args, check=False, config=config, **masks, **scales),
        reference=lambda: reference.extend_attention(*e.args(), **masks, **scales),
        dims={"head_dim": head_dim, "group": q_heads // kv_heads},
        bytes_moved=cached * kv_heads * (head_dim + v_row) * _elt(e.pool.k_buffer.dtype)
        + (tokens * kv_heads * (head_dim + v_row) + tokens * q_heads * (head_dim + v_dim)) * _elt(dtype),
        flops=4 * causal_pairs * q_heads * head_dim,
        # SGLang's extend takes (logit_cap, sliding_window, custom_mask, mask_indptr) next
        args=args + ((0.0, None, masks["custom_mask"], masks["mask_indptr"]) if masks else ()),
        time_reference=cached + tokens <= TORCH_REFERENCE_MAX_TOKENS // 8,
    )


def _heads(preset, quick):
    return {"q_heads": 8, "kv_heads": 2, "head_dim": 64} if quick else {
        "q_heads": preset.num_heads, "kv_heads": preset.num_kv_heads, "head_dim": preset.head_dim}  # fmt: skip


# kv_dtype: the KV pool's dtype, ``auto`` (the model's) or SGLang's fp8 words
# (``--shape kv_dtype=fp8_e4m3``; `kv_dtype.pool_dtype`) in every shape with a pool


def store_kv_shapes(preset, quick):
    heads = _heads(preset, quick)
    return [{"tokens": t, "kv_heads": heads["kv_heads"], "head_dim": heads["head_dim"], "kv_dtype": "auto"}
            for t in ([16] if quick else [1, 64, 4096])]  # fmt: skip


def decode_shapes(preset, quick):
    # v_head_dim: MLA's is smaller than head_dim (V the latent part of K's rows),
    # ``kunlun-triton inspect --shape head_dim=576 --shape v_head_dim=512``
    v_dim = {} if quick else {"v_head_dim": preset.head_dim}
    # sinks: gpt-oss's per-head sink logits (``--shape sinks=0,1``: without and with, one inspect run)
    return [{"batch": b, "context_len": c, **_heads(preset, quick), **v_dim, "kv_dtype": "auto", "sinks": False}
            for b in ([1, 2] if quick else [1, 8, 32, 64]) for c in ([64, 256] if quick else [1024, 4096, 16384, 32768])]  # fmt: skip


def extend_shapes(preset, quick):
    # custom_mask: target verify's tree mask (``--shape custom_mask=1``, `verify_mask`); v_head_dim
    # as decode's (MLA: ``--shape head_dim=576 --shape v_head_dim=512``)
    v_dim = {} if quick else {"v_head_dim": preset.head_dim}
    return [{"batch": b, "prefix_len": p, "extend_len": e, **_heads(preset, quick), **v_dim, "custom_mask": False, "kv_dtype": "auto",
             "sinks": False}
            for b in ([1, 2] if quick else [1, 8]) for p in ([0, 64] if quick else [0, 4096])
            for e in ([32] if quick else [512, 2048])]  # fmt: skip


# ---- kernels: the launches of one call, planned for the active target on
# meta tensors (no memory, any size): `OpSpec.kernels`.


def store_kv_kernels(shape, dtype, config):
    from ...introspect.launches import meta_kernel_specs

    tokens, kv_heads, head_dim = shape["tokens"], shape["kv_heads"], shape["head_dim"]
    k, v = _meta(tokens, kv_heads, head_dim, dtype=dtype), _meta(tokens, kv_heads, head_dim, dtype=dtype)
    k_buffer, v_buffer = _kv_pool(shape.get("slots", max(4 * tokens, 16)), kv_heads, head_dim, head_dim,
                                  pool_dtype(shape, dtype))  # fmt: skip
    loc = _meta(tokens, dtype=torch.int64)
    return meta_kernel_specs(lambda: store_kv(k, v, k_buffer, v_buffer, loc, check=False, config=config))


def decode_attention_kernels(shape, dtype, config):
    from ...introspect.launches import meta_kernel_specs, with_loop_items

    lens = shape.get("lens") or [shape["context_len"]] * shape["batch"]
    batch, total = len(lens), sum(lens)
    q_heads, kv_heads, head_dim = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    v_dim = shape.get("v_head_dim", head_dim)
    q, o = _meta(batch, q_heads, head_dim, dtype=dtype), _meta(batch, q_heads, v_dim, dtype=dtype)
    slots = total + shape.get("page_size", 1)
    k_buffer, v_buffer = _kv_pool(slots, kv_heads, head_dim, v_dim, pool_dtype(shape, dtype))
    indptr, indices = _meta(batch + 1, dtype=torch.int32), _meta(total, dtype=torch.int32)
    sinks = _sinks_kwargs(shape, "meta", meta=True)
    specs = meta_kernel_specs(lambda: decode_attention(q, k_buffer, v_buffer, o, indptr, indices, head_dim**-0.5,
                                                       check=False, config=config, **sinks))  # fmt: skip
    return with_loop_items(specs, {"decode_partial_kernel": "BLOCK_N"})


def extend_attention_kernels(shape, dtype, config):
    from ...introspect.launches import meta_kernel_specs, with_loop_items

    prefix = shape.get("prefix_lens") or [shape["prefix_len"]] * shape["batch"]
    extend = shape.get("extend_lens") or [shape["extend_len"]] * shape["batch"]
    q_heads, kv_heads, head_dim = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    v_dim = shape.get("v_head_dim", head_dim)
    tokens, cached = sum(extend), sum(prefix)
    q, o = _meta(tokens, q_heads, head_dim, dtype=dtype), _meta(tokens, q_heads, v_dim, dtype=dtype)
    k, v = _kv_pool(tokens, kv_heads, head_dim, v_dim, dtype)
    slots = cached + tokens + shape.get("page_size", 1)
    k_buffer, v_buffer = _kv_pool(slots, kv_heads, head_dim, v_dim, pool_dtype(shape, dtype))
    qo_indptr, kv_indptr = _meta(len(extend) + 1, dtype=torch.int32), _meta(len(prefix) + 1, dtype=torch.int32)
    kv_indices = _meta(cached, dtype=torch.int32)
    masks = _mask_kwargs(shape, prefix, extend, "meta", meta=True)
    specs = meta_kernel_specs(lambda: extend_attention(q, k, v, o, k_buffer, v_buffer, qo_indptr, kv_indptr,
                                                       kv_indices, max(extend), head_dim**-0.5, check=False,
                                                       config=config, **masks, **_sinks_kwargs(shape, "meta", True)))  # fmt: skip
    return with_loop_items(specs, {"extend_kernel": "BLOCK_N"})


def extend_attention_traffic(shape, dtype) -> int:
    """Bytes one call moves from L2 into its programs as the active target's
    config tiles it (`extend_inputs.extend_traffic`; MLA's latent once where
    the launch takes V from K)."""
    from .extend_inputs import extend_traffic

    [spec] = extend_attention_kernels(shape, dtype, None)
    c = spec.constexprs
    prefix = shape.get("prefix_lens") or [shape["prefix_len"]] * shape["batch"]
    extend = shape.get("extend_lens") or [shape["extend_len"]] * shape["batch"]
    return extend_traffic(prefix, extend, shape["q_heads"], shape["head_dim"], shape.get("v_head_dim", shape["head_dim"]),
                          _elt(dtype), c["BLOCK_M"], kv_elt=_elt(pool_dtype(shape, dtype)), v_in_k=c["V_IN_K"],
                          new_v_in_k=c["NEW_V_IN_K"])  # fmt: skip


def decode_split_counts(shape, dtype):
    """(non-empty splits per request, stage-1 programs per request and split)
    as the active target's config splits a decode call of `shape`."""
    from .decode_splits import _plan, head_programs, split_policy, splits_used

    lens = shape.get("lens") or [shape["context_len"]] * shape["batch"]
    q_heads, kv_heads, head_dim = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    v_dim = shape.get("v_head_dim", head_dim)
    plan = _plan(None, dtype, head_dim, v_dim, q_heads // kv_heads, None)
    per_split = head_programs(plan, q_heads, kv_heads)
    tokens, cap = split_policy(plan, len(lens), per_split)
    cap = max(1, min(cap, -(-sum(lens) // tokens)))
    return [splits_used(n, tokens, cap, plan.block_n) for n in lens], per_split


def decode_attention_traffic(shape, dtype) -> int:
    """Bytes one call moves as the active target's config splits it."""
    from .decode_splits import _plan

    lens = shape.get("lens") or [shape["context_len"]] * shape["batch"]
    q_heads, kv_heads, head_dim = shape["q_heads"], shape["kv_heads"], shape["head_dim"]
    v_dim = shape.get("v_head_dim", head_dim)
    splits, _ = decode_split_counts(shape, dtype)
    plan = _plan(None, dtype, head_dim, v_dim, q_heads // kv_heads, None)
    v_in_k = v_dim < head_dim and plan.block_d == plan.block_dv == v_dim  # decode_attention's V_IN_K
    return decode_traffic(lens, q_heads, kv_heads, head_dim, v_dim, _elt(dtype), splits,
                          _elt(pool_dtype(shape, dtype)), v_in_k=v_in_k)  # fmt: skip


def decode_attention_programs(shape, dtype) -> int:
    """Stage-1 programs of one call that have keys to fold (the grid's others exit at once)."""
    splits, per_split = decode_split_counts(shape, dtype)
    return per_split * sum(splits)


# ---- tune: lookup dims are store_kv (row_width, tokens), decode and extend
# (head_dim, group); batch sizes and context lengths are not lookup dims (no
# constexpr depends on them), so tuned configs serve every batch and length.


def store_kv_tune_shapes(preset, quick):
    """store_kv's bench shapes at the model dtype's pool: its configs are
    looked up by (row_width, tokens), which no kv_dtype tells apart (tune
    refuses ``--shape kv_dtype``; bench and inspect measure fp8 pools)."""
    return [{k: v for k, v in shape.items() if k != "kv_dtype"} for shape in store_kv_shapes(preset, quick)]


def decode_tune_shapes(preset, quick):
    return [{"batch": b, "context_len": 64 if quick else 4096, **_heads(preset, quick)}
            for b in ([2] if quick else [1, 8, 32, 64])]  # fmt: skip


def extend_tune_shapes(preset, quick):
    return [{"batch": 1 if quick else 4, "prefix_len": 16 if quick else 1024, "extend_len": 32 if quick else 512,
             **_heads(preset, quick)}]  # fmt: skip


def decode_generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Batch 1 at every context 1..max_context (every `step`), then batches
    1..max_batch at a mid-sized context."""
    yield from ({"batch": 1, "context_len": n, **_heads(preset, False)} for n in range(1, max_context + 1, step))
    yield from ({"batch": b, "context_len": 1000 + b, **_heads(preset, False)} for b in range(1, max_batch + 1))


def extend_generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Prompts of 1..max_context new tokens in chunks of at most 8192
    (SGLang's chunked prefill), then batches of short prompts."""
    for n in range(1, max_context + 1, max(step, 61)):
        yield {"batch": 1, "prefix_len": n - min(n, 8192), "extend_len": min(n, 8192), **_heads(preset, False)}
    yield from ({"batch": b, "prefix_len": 0, "extend_len": 100 + b, **_heads(preset, False)} for b in range(1, max_batch + 1))


def store_kv_generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Every batch 1..max_batch, then prefill token counts up to 8192."""
    tokens = list(range(1, max_batch + 1)) + list(range(257, 8193, 97))
    return ({"tokens": t, "kv_heads": preset.num_kv_heads, "head_dim": preset.head_dim} for t in tokens)

_SERVED, _BASELINES = ("attention backend", "draft attention backends"), ("bench", "inspect", "traffic", "launcher")
SPECS = [
    OpSpec("store_kv", "attention", store_kv_case, (({"tokens": 5, "kv_heads": 2, "head_dim": 64}, torch.float16),),
           store_kv_shapes, bench_dtype=torch.float16, tune_candidates=store_kv_candidates,
           tune_shapes=store_kv_tune_shapes, x_axis="tokens",
           kernels=store_kv_kernels, config_keys={"TOKENS_PER_PROGRAM": TILE, "MAX_BLOCK_C": TILE},
           function=store_kv, lookup_dims=("row_width", "tokens"), generation_shapes=store_kv_generation_shapes,
           graph_capture=True, sglang=(*_SERVED, "KV pool")),
    OpSpec("decode_attention", "attention", decode_attention_case,
           (({"lens": [37, 1, 100], "q_heads": 8, "kv_heads": 2, "head_dim": 128, "page_size": 16}, torch.float16),),
           decode_shapes, bench_dtype=torch.float16, tune_candidates=decode_candidates,
           tune_shapes=decode_tune_shapes, tolerance_scale=2, x_axis="context_len", kernels=decode_attention_kernels,
           traffic=decode_attention_traffic, programs=decode_attention_programs,
           config_keys={"formulation": FORMULATION, "BLOCK_N": TILE, "MAX_KV_SPLITS": COUNT,
                        "PROGRAMS_PER_UNIT": COUNT, "MIN_SPLIT_TOKENS": COUNT, "MAX_BLOCK_H": TILE,
                        "DIRECT_SINGLE_SPLIT": FLAG, "BATCH_ROWS": NON_NEGATIVE, "FP8_RUNTIME_UNIT": FLAG,
                        "K_KEY_MAJOR": FLAG, "PREFETCH_SLOTS": FLAG},
           function=decode_attention, lookup_dims=("head_dim", "group"), generation_shapes=decode_generation_shapes,
           sglang=_SERVED, sglang_baselines=baselines("attention:decode", *_BASELINES, "programs")),
    OpSpec("extend_attention", "attention", extend_attention_case,
           (({"prefix_lens": [20, 0], "extend_lens": [9, 24], "q_heads": 8, "kv_heads": 2, "head_dim": 128, "page_size": 16}, torch.float16),
            ({"prefix_lens": [37, 5], "extend_lens": [8, 4], "q_heads": 8, "kv_heads": 2, "head_dim": 128, "page_size": 16,
              "custom_mask": True}, torch.float16)),  # target verify
           extend_shapes, bench_dtype=torch.float16, tune_candidates=extend_candidates,
           tune_shapes=extend_tune_shapes, tune_keep=extend_keep, tolerance_scale=2, x_axis="prefix_len",
           kernels=extend_attention_kernels, traffic=extend_attention_traffic,
           config_keys={"formulation": FORMULATION, "BLOCK_M": TILE, "BLOCK_N": TILE, "FP8_KV_BLOCK_N": TILE,
                        "VERIFY_BLOCK_M": TILE, "VERIFY_BLOCK_N": TILE, "VERIFY_NUM_WARPS": TILE,
                        "FP8_RUNTIME_UNIT": FLAG},
           function=extend_attention, lookup_dims=("head_dim", "group"), generation_shapes=extend_generation_shapes,
           sglang=_SERVED, sglang_baselines=baselines("attention:extend", *_BASELINES)),
]  # fmt: skip
