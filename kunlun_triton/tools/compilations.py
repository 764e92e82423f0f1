"""How many times serving a generation would compile each kernel.

Triton compiles a kernel once per distinct specialization: constexpr values,
argument dtypes, ints equal to 1 and 16-divisibility of ints and pointers
(unless ``do_not_specialize``d), launch options. A decode step whose
constexprs or specialised ints depend on the batch size or the context
length recompiles mid-serving (and cannot be replayed from a CUDA graph).

`generation_shapes` is the shapes one model meets while generating: a batch
of one from 1 to `max_context` tokens, then batches 1..`max_batch`;
`count_compilations` plans every shape's launches (`OpSpec.kernels`, or an
SGLang baseline's ``inspect_specs``) for the active target, with launches
stubbed and tensors on the meta device, and counts the distinct compile
keys per kernel.
"""

from __future__ import annotations

import json
from collections import defaultdict

import torch

GENERATION_OPS = ("decode_attention", "extend_attention", "store_kv", "rms_norm", "fused_add_rms_norm",
                  "silu_and_mul", "gelu_and_mul", "rotary_embedding")  # fmt: skip


def generation_shapes(op: str, preset, max_context: int = 16384, max_batch: int = 256, step: int = 1):
    """The shapes of `op` over one generation of `preset` (a model preset):
    batch 1 at every context 1..max_context (every `step`), then batches
    1..max_batch at a mid-sized context. Extend: prompts of 1..max_context
    new tokens in chunks of at most 8192 (SGLang's chunked prefill), then
    batches of short prompts."""
    heads = {"q_heads": preset.num_heads, "kv_heads": preset.num_kv_heads, "head_dim": preset.head_dim}
    batches = range(1, max_batch + 1)
    if op == "decode_attention":
        yield from ({"batch": 1, "context_len": n, **heads} for n in range(1, max_context + 1, step))
        yield from ({"batch": b, "context_len": 1000 + b, **heads} for b in batches)
    elif op == "extend_attention":
        for n in range(1, max_context + 1, max(step, 61)):
            yield {"batch": 1, "prefix_len": n - min(n, 8192), "extend_len": min(n, 8192), **heads}
        yield from ({"batch": b, "prefix_len": 0, "extend_len": 100 + b, **heads} for b in batches)
    elif op == "store_kv":
        yield from ({"tokens": t, "kv_heads": preset.num_kv_heads, "head_dim": preset.head_dim}
                    for t in list(batches) + list(range(257, 8193, 97)))  # fmt: skip
    elif op in ("rms_norm", "fused_add_rms_norm"):
        yield from ({"rows": r, "hidden_size": preset.hidden_size} for r in list(batches) + list(range(257, 8193, 97)))
    elif op in ("silu_and_mul", "gelu_and_mul"):
        yield from ({"rows": r, "d": preset.intermediate_size} for r in list(batches) + list(range(257, 8193, 97)))
    elif op == "rotary_embedding":
        yield from ({"tokens": t, **heads, "rope_theta": preset.rope_theta} for t in list(batches) + [1024, 8192])
    else:
        raise ValueError(f"no generation shapes for {op!r}; ops: {', '.join(GENERATION_OPS)}")


def _key(spec) -> str:
    return json.dumps([spec.signature, spec.constexprs, spec.attrs, spec.options], sort_keys=True, default=str)


def count_compilations(plan, shapes, dtype=torch.bfloat16) -> dict[str, int]:
    """``{kernel name: distinct compile keys}`` over `shapes`, where
    ``plan(shape, dtype)`` returns the `KernelSpec`s one call launches."""
    keys = defaultdict(set)
    for shape in shapes:
        for spec in plan(shape, dtype):
            keys[spec.name].add(_key(spec))
    return {name: len(k) for name, k in sorted(keys.items())}
