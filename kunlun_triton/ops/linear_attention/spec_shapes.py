"""Shapes and dims the linear-attention specs share (spec.py, split_qkvzba_spec.py):
Qwen3-Next-80B-A3B's gated delta net by default, the tiny dims doctor runs, the
prefill batches of a generation."""

from __future__ import annotations

import torch

QWEN3_NEXT = {"key_heads": 16, "value_heads": 32, "key_dim": 128, "value_dim": 128, "width": 4}
CONV_DIM = 2 * 16 * 128 + 32 * 128
TINY = {"key_heads": 2, "value_heads": 4, "key_dim": 16, "value_dim": 16}
PREFILL_LENGTHS = ((1,), (7,), (64,), (65, 3), (512,), (1000, 17, 300), (4096,), (8192,))
GDN_LOOKUP = ("key_dim", "value_dim")
SERVED = ("hybrid linear attention",)  # the install table's touchpoint (sglang_plugin/linear_attention/)


def seeded_generator(shape) -> torch.Generator:
    return torch.Generator().manual_seed(hash(tuple(sorted((k, str(v)) for k, v in shape.items()))) % 2**31)


def element_size(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def model_dims(shape) -> dict:
    return {k: shape.get(k, v) for k, v in QWEN3_NEXT.items() if k != "width"}
