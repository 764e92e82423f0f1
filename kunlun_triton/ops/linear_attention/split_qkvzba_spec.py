"""The spec of `gdn_split_qkvzba` (a gated-delta-net layer's input projections
cut into q | k | v, z, b, a) for doctor, bench, tune and inspect (see `ops.spec`;
the family's list: spec.py). Shapes name the tokens (``tokens``) and the
layout (``layout``); model dims default to Qwen3-Next-80B-A3B's."""

from __future__ import annotations

import torch

from ...runtime.config_keys import COUNT, TILE
from ..spec import OpCase, OpSpec, baselines
from . import reference
from .spec_shapes import GDN_LOOKUP, PREFILL_LENGTHS, SERVED, TINY, element_size, model_dims, seeded_generator
from .split_qkvzba import gdn_split_qkvzba

SPLIT_LAYOUTS = ("interleaved", "contiguous")  # Qwen3-Next's fused checkpoint, Qwen3.5's separate projections


def _split_args(shape, dtype, device, meta: bool = False):
    """The op's positional inputs: [tokens, 2 H K + 2 HV V] and [tokens, 2 HV],
    contiguous as SGLang's projections hand them (meta: shapes only)."""
    d, tokens = model_dims(shape), shape["tokens"]
    width = 2 * d["key_heads"] * d["key_dim"] + 2 * d["value_heads"] * d["value_dim"]
    if meta:
        qkvz, ba = (torch.empty(tokens, w, dtype=dtype, device="meta") for w in (width, 2 * d["value_heads"]))
    else:
        gen = seeded_generator(shape)
        qkvz, ba = (torch.randn(tokens, w, generator=gen).to(dtype).to(device) for w in (width, 2 * d["value_heads"]))
    layout = shape.get("layout", "interleaved")
    return (qkvz, ba, d["key_heads"], d["value_heads"], d["key_dim"], d["value_dim"], layout)


def gdn_split_qkvzba_case(shape, dtype, device) -> OpCase:
    args = _split_args(shape, dtype, device)
    d = model_dims(shape)
    return OpCase(run=lambda config: gdn_split_qkvzba(*args, check=False, config=config),
                  reference=lambda: reference.gdn_split_qkvzba(*args), dims={"key_dim": d["key_dim"],
                  "value_dim": d["value_dim"]}, bytes_moved=2 * (args[0].numel() + args[1].numel()) * element_size(dtype),
                  args=args, call=lambda: gdn_split_qkvzba(*args, check=False))  # fmt: skip


def split_compare(out, ref, dtype) -> tuple[float, bool]:
    """A copy: bitwise equal, shapes and contiguity as SGLang's callers read them."""
    err, ok = 0.0, True
    for got, want in zip(out, ref):
        same = got.shape == want.shape and got.is_contiguous() and got.dtype == want.dtype
        err = max(err, (got.double() - want.double()).abs().max().item() if same and got.numel() else 0.0)
        ok = ok and same and torch.equal(got.cpu(), want.cpu())
    return err, ok


def _split_kernels(shape, dtype, config):
    import dataclasses

    from ...introspect.launches import meta_kernel_specs

    args = _split_args(shape, dtype, None, meta=True)
    (spec,) = meta_kernel_specs(lambda: gdn_split_qkvzba(*args, check=False, config=config))
    programs = -(-shape["tokens"] // spec.constexprs["BLOCK_T"]) * (args[2] // spec.constexprs["HEADS"])
    return [dataclasses.replace(spec, work={"programs": programs, "tokens": shape["tokens"], "trips": ()})]


def split_bench_shapes(preset, quick: bool) -> list[dict]:
    tokens = (2,) if quick else (1, 64, 512, 4096)
    return [{"tokens": t, "layout": layout} for layout in SPLIT_LAYOUTS for t in tokens]


def split_generation_shapes(preset, max_context: int, max_batch: int, step: int):
    """Decode batches and prefill chunks alike: one launch over their tokens."""
    lengths = {sum(ls) for ls in PREFILL_LENGTHS} | set(range(1, max_batch + 1))
    return ({"tokens": n} for n in sorted(lengths))


def split_tune_candidates(quick: bool) -> list[dict]:
    return [{"BLOCK_T": t, "HEADS_PER_PROGRAM": h, "num_warps": w} for t in ((1, 4) if quick else (1, 2, 4, 8, 16))
            for h in ((2,) if quick else (1, 2, 4, 16)) for w in ((1,) if quick else (1, 2, 4))]  # fmt: skip


_DOCTOR_SPLIT = (({"tokens": 5, **TINY}, torch.float32), ({"tokens": 3, **TINY, "layout": "contiguous"},
                 torch.bfloat16), ({"tokens": 4, "key_heads": 2, "value_heads": 2, "key_dim": 12, "value_dim": 20},
                 torch.float16))  # fmt: skip
SPLIT_SPEC = OpSpec("gdn_split_qkvzba", "linear_attention", gdn_split_qkvzba_case, _DOCTOR_SPLIT, split_bench_shapes,
           tune_candidates=split_tune_candidates, compare=split_compare, x_axis="tokens", kernels=_split_kernels,
           config_keys={"BLOCK_T": TILE, "HEADS_PER_PROGRAM": COUNT}, function=gdn_split_qkvzba, lookup_dims=GDN_LOOKUP,
           generation_shapes=split_generation_shapes, graph_capture=True,
           sglang_baselines=baselines("split_qkvzba:gdn_split_qkvzba", "inspect"), sglang=SERVED)  # fmt: skip
