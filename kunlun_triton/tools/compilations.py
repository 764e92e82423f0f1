"""How many times serving a generation would compile each kernel.

Triton compiles a kernel once per distinct specialization: constexpr values,
argument dtypes, ints equal to 1 and 16-divisibility of ints and pointers
(unless ``do_not_specialize``d), launch options. A decode step whose
constexprs or specialised ints depend on the batch size or the context
length recompiles mid-serving (and cannot be replayed from a CUDA graph).

`generation_shapes` is the shapes one model meets while generating (each
op's spec says which: ``OpSpec.generation_shapes``), e.g. for decode a batch
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


def generation_ops() -> tuple[str, ...]:
    """The ops on a decoder's per-token path (their specs give `generation_shapes`)."""
    from ..ops.spec import specs_where

    return specs_where(lambda spec: spec.generation_shapes is not None)


def generation_shapes(op: str, preset, max_context: int = 16384, max_batch: int = 256, step: int = 1):
    """The shapes of `op` over one generation of `preset` (a model preset),
    from its spec (`OpSpec.generation_shapes`): for decode, batch 1 at every
    context 1..max_context (every `step`), then batches 1..max_batch at a
    mid-sized context; each op's spec says what it meets."""
    from ..ops.spec import all_specs

    spec = all_specs().get(op)
    if spec is None or spec.generation_shapes is None:
        raise ValueError(f"no generation shapes for {op!r}; ops: {', '.join(generation_ops())}")
    return spec.generation_shapes(preset, max_context, max_batch, step)


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
