"""Specs of the linear-attention ops for doctor, bench, tune and inspect
(see `ops.spec`).

Shapes name a ragged batch by its request lengths (``lengths``, a tuple) or a
decode batch (``batch``); model dims default to Qwen3-Next-80B-A3B's gated
delta net (16 key heads, 32 value heads, head dims 128, conv kernel 4: conv
channels 2 x 16 x 128 + 32 x 128 = 8192). Bytes are the floor: inputs read
once, outputs written once, each request's states read once and written once.
The shapes and dims the specs share: spec_shapes; gdn_split_qkvzba's spec:
split_qkvzba_spec (listed here).
"""

from __future__ import annotations

import torch

from ...runtime.config_keys import TILE
from ..spec import FORMULATION, OpCase, OpSpec, baselines
from . import reference
from .conv import causal_conv1d, causal_conv1d_update
from .gdn import gated_delta_rule_decode, gated_delta_rule_prefill
from .spec_shapes import (CONV_DIM, GDN_LOOKUP, PREFILL_LENGTHS, QWEN3_NEXT, SERVED, TINY, element_size,
                          model_dims, seeded_generator)  # fmt: skip
from .split_qkvzba_spec import SPLIT_SPEC


def _starts(lengths, device):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


# ---- causal conv1d ----

def _conv_inputs(shape, dtype, device, tokens: int):
    dim, width = shape.get("dim", CONV_DIM), shape.get("width", 4)
    requests = len(shape["lengths"]) if "lengths" in shape else shape["batch"]
    gen = seeded_generator(shape)
    x = torch.randn(tokens, dim, generator=gen).to(dtype).to(device)
    weight = (torch.randn(dim, width, generator=gen) * 0.5).to(dtype).to(device)
    bias = torch.randn(dim, generator=gen).to(dtype).to(device)
    states = torch.randn(requests + 1, dim, width - 1, generator=gen).to(dtype).to(device)
    slots = torch.arange(requests, 0, -1, dtype=torch.int32, device=device)  # not the identity
    return x, weight, bias, states, slots


def causal_conv1d_case(shape, dtype, device) -> OpCase:
    lengths = tuple(shape["lengths"])
    x, weight, bias, states, slots = _conv_inputs(shape, dtype, device, sum(lengths))
    starts = _starts(lengths, device)
    init = torch.tensor([i % 2 == 0 for i in range(len(lengths))], device=device)

    def run(config):
        s = states.clone()
        return causal_conv1d(x, weight, bias, s, starts, slots, init, max_len=max(lengths), check=False,
                             config=config), s  # fmt: skip

    def ref():
        s = states.clone()
        return reference.causal_conv1d(x, weight, bias, s, starts, slots, init), s

    dim, width = weight.shape
    moved = (2 * x.numel() + 2 * len(lengths) * dim * (width - 1)) * element_size(dtype)
    return OpCase(run=run, reference=ref, dims={"dim": dim}, bytes_moved=moved,
                  call=lambda: causal_conv1d(x, weight, bias, states, starts, slots, init, max_len=max(lengths),
                                             check=False))  # fmt: skip


def causal_conv1d_update_case(shape, dtype, device) -> OpCase:
    x, weight, bias, states, slots = _conv_inputs(shape, dtype, device, shape["batch"])

    def run(config):
        s = states.clone()
        return causal_conv1d_update(x, s, weight, bias, slots, check=False, config=config), s

    def ref():
        s = states.clone()
        return reference.causal_conv1d_update(x, s, weight, bias, slots), s

    dim, width = weight.shape
    moved = (2 * x.numel() + 2 * shape["batch"] * dim * (width - 1)) * element_size(dtype)
    return OpCase(run=run, reference=ref, dims={"dim": dim}, bytes_moved=moved,
                  call=lambda: causal_conv1d_update(x, states, weight, bias, slots, check=False))  # fmt: skip


def _conv_kernels(update: bool):
    def kernels(shape, dtype, config):
        from ...introspect.launches import meta_kernel_specs

        dim, width = shape.get("dim", CONV_DIM), shape.get("width", 4)
        meta = lambda *s, dtype=dtype: torch.empty(s, dtype=dtype, device="meta")  # noqa: E731
        weight, bias = meta(dim, width), meta(dim)
        if update:
            batch = shape["batch"]
            states = meta(batch + 1, dim, width - 1)
            slots = meta(batch, dtype=torch.int32)
            return meta_kernel_specs(lambda: causal_conv1d_update(meta(batch, dim), states, weight, bias, slots,
                                                                  check=False, config=config))  # fmt: skip
        lengths = tuple(shape["lengths"])
        n = len(lengths)
        states = meta(n + 1, dim, width - 1)
        return meta_kernel_specs(lambda: causal_conv1d(
            meta(sum(lengths), dim), weight, bias, states, meta(n + 1, dtype=torch.int32), meta(n, dtype=torch.int32),
            meta(n, dtype=torch.bool), max_len=max(lengths), check=False, config=config))  # fmt: skip

    return kernels


def prefill_generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Prefill batches from one token to 8k, ragged or not (model dims fixed: Qwen3-Next's)."""
    return ({"lengths": lengths} for lengths in PREFILL_LENGTHS + tuple((n,) for n in range(2, 300, 37)))


def decode_generation_shapes(preset, max_context: int, max_batch: int, step: int):
    return ({"batch": b} for b in range(1, max_batch + 1))


def _conv_bench(update: bool):
    def shapes(preset, quick: bool) -> list[dict]:
        if update:
            return [{"batch": b} for b in ((2,) if quick else (1, 16, 64, 256))]
        return [{"lengths": lengths} for lengths in (((5, 3),) if quick else ((512,), (4096,), (1000, 17, 300)))]

    return shapes


def conv_tune_candidates(quick: bool) -> list[dict]:
    blocks = (128, 256) if quick else (128, 256, 512)
    return [{"BLOCK_D": d, "BLOCK_T": t} for d in blocks for t in ((32, 64) if quick else (16, 32, 64, 128))]


def conv_update_tune_candidates(quick: bool) -> list[dict]:
    return [{"BLOCK_D": d} for d in ((128, 256) if quick else (64, 128, 256, 512, 1024))]


CONV_KEYS = {"BLOCK_D": TILE, "BLOCK_T": TILE}
_DOCTOR_CONV = (({"lengths": (5, 1, 3), "dim": 40, "width": 4}, torch.float32),
                ({"lengths": (2, 6), "dim": 24, "width": 3}, torch.bfloat16))  # fmt: skip
_DOCTOR_UPDATE = (({"batch": 3, "dim": 40, "width": 4}, torch.float32),
                  ({"batch": 2, "dim": 24, "width": 4}, torch.bfloat16))  # fmt: skip

# ---- gated delta rule ----

def _gdn_inputs(shape, dtype, device, tokens: int, requests: int):
    d = model_dims(shape)
    gen = seeded_generator(shape)
    rnd = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q = rnd(tokens, d["key_heads"], d["key_dim"]).to(dtype).to(device)
    k = rnd(tokens, d["key_heads"], d["key_dim"]).to(dtype).to(device)
    v = rnd(tokens, d["value_heads"], d["value_dim"]).to(dtype).to(device)
    a = rnd(tokens, d["value_heads"]).to(dtype).to(device)
    b = rnd(tokens, d["value_heads"]).to(dtype).to(device)
    A_log = (torch.rand(d["value_heads"], generator=gen) * 2 - 1).to(device)
    dt_bias = rnd(d["value_heads"]).to(device)
    pool = (rnd(requests + 1, d["value_heads"], d["value_dim"], d["key_dim"]) * 0.1).to(device)
    slots = torch.arange(requests, 0, -1, dtype=torch.int32, device=device)
    return (q, k, v, a, b, A_log, dt_bias), pool, slots


def _state_bytes(shape, requests: int) -> int:
    d = model_dims(shape)
    return 2 * requests * d["value_heads"] * d["key_dim"] * d["value_dim"] * 4  # fp32, in once and out once


def _io_bytes(shape, dtype, tokens: int) -> int:
    d = model_dims(shape)
    per_token = 2 * d["key_heads"] * d["key_dim"] + 2 * d["value_heads"] * d["value_dim"] + 2 * d["value_heads"]
    return tokens * per_token * element_size(dtype)  # q, k, v, a, b in; o out


def gated_delta_rule_decode_case(shape, dtype, device) -> OpCase:
    batch = shape["batch"]
    inputs, pool, slots = _gdn_inputs(shape, dtype, device, batch, batch)
    d = model_dims(shape)

    def run(config):
        p = pool.clone()
        return gated_delta_rule_decode(*inputs, p, slots, check=False, config=config), p

    def ref():
        p = pool.clone()
        return reference.gated_delta_rule_decode(*inputs, p, slots).to(dtype), p

    return OpCase(run=run, reference=ref, dims={"key_dim": d["key_dim"], "value_dim": d["value_dim"]},
                  bytes_moved=_state_bytes(shape, batch) + _io_bytes(shape, dtype, batch),
                  call=lambda: gated_delta_rule_decode(*inputs, pool, slots, check=False))  # fmt: skip


def gated_delta_rule_prefill_case(shape, dtype, device) -> OpCase:
    lengths = tuple(shape["lengths"])
    inputs, pool, slots = _gdn_inputs(shape, dtype, device, sum(lengths), len(lengths))
    starts = _starts(lengths, device)
    init = torch.tensor([i % 2 == 0 for i in range(len(lengths))], device=device)
    d = model_dims(shape)

    def run(config):
        p = pool.clone()
        return gated_delta_rule_prefill(*inputs, p, slots, starts, init, check=False, config=config), p

    def ref():
        p = pool.clone()
        return reference.gated_delta_rule_prefill(*inputs, p, slots, starts, init).to(dtype), p

    return OpCase(run=run, reference=ref, dims={"key_dim": d["key_dim"], "value_dim": d["value_dim"]},
                  bytes_moved=_state_bytes(shape, len(lengths)) + _io_bytes(shape, dtype, sum(lengths)),
                  call=lambda: gated_delta_rule_prefill(*inputs, pool, slots, starts, init, check=False))  # fmt: skip


def _gdn_kernels(decode: bool):
    def kernels(shape, dtype, config):
        from ...introspect.launches import meta_kernel_specs

        d = model_dims(shape)
        meta = lambda *s, dtype=dtype: torch.empty(s, dtype=dtype, device="meta")  # noqa: E731
        n = shape["batch"] if decode else len(shape["lengths"])
        tokens = n if decode else sum(shape["lengths"])
        inputs = (meta(tokens, d["key_heads"], d["key_dim"]), meta(tokens, d["key_heads"], d["key_dim"]),
                  meta(tokens, d["value_heads"], d["value_dim"]), meta(tokens, d["value_heads"]),
                  meta(tokens, d["value_heads"]), meta(d["value_heads"], dtype=torch.float32),
                  meta(d["value_heads"], dtype=torch.float32))  # fmt: skip
        pool = meta(n + 1, d["value_heads"], d["value_dim"], d["key_dim"], dtype=torch.float32)
        slots = meta(n, dtype=torch.int32)
        if decode:
            specs = meta_kernel_specs(lambda: gated_delta_rule_decode(*inputs, pool, slots, check=False, config=config))
        else:
            specs = meta_kernel_specs(lambda: gated_delta_rule_prefill(
                *inputs, pool, slots, meta(n + 1, dtype=torch.int32), meta(n, dtype=torch.bool), check=False,
                config=config))  # fmt: skip
        return [_with_work(spec, shape, decode) for spec in specs]

    return kernels


def _with_work(spec, shape, decode: bool):
    """`KernelSpec.work` of a gated-delta-rule launch (inspect's per-token
    counts). Decode and prefill's state pass: a program per (value block,
    value head, request), the state pass's loop a request's chunks (trips:
    the mean over the programs). Prefill's chunk kernel: a program per
    (chunk, value head), no loop; its grid's spare programs (the bound
    tokens // CHUNK + requests less the chunks there are) load one index
    and exit, and are not counted."""
    import dataclasses

    d = model_dims(shape)
    n = shape["batch"] if decode else len(shape["lengths"])
    tokens, trips = n, ()
    if not decode:
        chunk = spec.constexprs["CHUNK"]
        chunks = sum(-(-length // chunk) for length in shape["lengths"])
        tokens = sum(shape["lengths"])
        if "BLOCK_V" not in spec.constexprs:  # the chunk kernel
            return dataclasses.replace(spec, work={"programs": chunks * d["value_heads"], "tokens": tokens, "trips": ()})
        trips = (chunks / n,)
    programs = -(-d["value_dim"] // spec.constexprs["BLOCK_V"]) * d["value_heads"] * n
    return dataclasses.replace(spec, work={"programs": programs, "tokens": tokens, "trips": trips})


def gdn_decode_traffic(shape, dtype) -> int:
    """Bytes one decode call moves into its programs: each (request, value
    head, BLOCK_V columns) program reads its [K, BLOCK_V] fp32 state slice
    and writes it back, reads q's and k's rows (again per value block), its
    v columns, a, b, A_log, dt_bias and its slot, and writes its output
    columns. The floor (`bytes_moved`) reads q and k once per key head."""
    from .gdn import _get_plan

    d, batch, elt = model_dims(shape), shape["batch"], element_size(dtype)
    k, v, hv = d["key_dim"], d["value_dim"], d["value_heads"]
    bv = _get_plan("gated_delta_rule_decode", k, v, hv // d["key_heads"], True, False, True, None).block_v
    per_program = 2 * bv * k * 4 + 2 * k * elt + 2 * bv * elt + 2 * elt + 2 * 4 + 4
    return batch * hv * -(-v // bv) * per_program


def _gdn_bench(decode: bool):
    def shapes(preset, quick: bool) -> list[dict]:
        if decode:
            return [{"batch": b} for b in ((2,) if quick else (1, 16, 64, 256))]
        return [{"lengths": lengths} for lengths in (((5, 3),) if quick else ((512,), (4096,), (1000, 17, 300)))]

    return shapes


def gdn_decode_tune_candidates(quick: bool) -> list[dict]:
    return [{"BLOCK_V": v, "num_warps": w} for v in ((16, 32) if quick else (8, 16, 32, 64)) for w in (1, 4)]


def gdn_prefill_tune_candidates(quick: bool) -> list[dict]:
    return [{"CHUNK": c, "BLOCK_V": v} for c in ((16, 64) if quick else (16, 32, 64)) for v in (16, 32)]


_DOCTOR_DECODE = (({"batch": 3, **TINY}, torch.float32), ({"batch": 2, **TINY}, torch.bfloat16))
_DOCTOR_PREFILL = (({"lengths": (5, 20, 1), **TINY}, torch.float32), ({"lengths": (3, 17), **TINY}, torch.bfloat16))

SPECS = [
    OpSpec("causal_conv1d", "linear_attention", causal_conv1d_case, _DOCTOR_CONV, _conv_bench(False),
           tune_candidates=conv_tune_candidates, x_axis="lengths", kernels=_conv_kernels(False), config_keys=CONV_KEYS,
           function=causal_conv1d, lookup_dims=("dim",), generation_shapes=prefill_generation_shapes, sglang=SERVED),
    OpSpec("causal_conv1d_update", "linear_attention", causal_conv1d_update_case, _DOCTOR_UPDATE,
           _conv_bench(True), tune_candidates=conv_update_tune_candidates, x_axis="batch",
           kernels=_conv_kernels(True), config_keys={"BLOCK_D": TILE}, function=causal_conv1d_update,
           lookup_dims=("dim",), generation_shapes=decode_generation_shapes, graph_capture=True,
           sglang_baselines=baselines("linear_attention:causal_conv1d_update", "inspect"), sglang=SERVED),
    OpSpec("gated_delta_rule_decode", "linear_attention", gated_delta_rule_decode_case, _DOCTOR_DECODE,
           _gdn_bench(True), tune_candidates=gdn_decode_tune_candidates, x_axis="batch", kernels=_gdn_kernels(True),
           config_keys={"BLOCK_V": TILE}, function=gated_delta_rule_decode, lookup_dims=GDN_LOOKUP,
           generation_shapes=decode_generation_shapes, graph_capture=True, traffic=gdn_decode_traffic,
           sglang_baselines=baselines("linear_attention:gated_delta_rule_decode", "inspect", "traffic"),
           sglang=SERVED),
    OpSpec("gated_delta_rule_prefill", "linear_attention", gated_delta_rule_prefill_case, _DOCTOR_PREFILL,
           _gdn_bench(False), tune_candidates=gdn_prefill_tune_candidates, x_axis="lengths",
           kernels=_gdn_kernels(False), config_keys={"CHUNK": TILE, "BLOCK_V": TILE, "formulation": FORMULATION},
           function=gated_delta_rule_prefill, lookup_dims=GDN_LOOKUP, generation_shapes=prefill_generation_shapes,
           sglang_baselines=baselines("linear_attention:gated_delta_rule_prefill", "inspect"), sglang=SERVED),
    SPLIT_SPEC,
]  # fmt: skip
