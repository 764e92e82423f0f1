"""Deterministic inference needs every per-token op to be batch-invariant: a
row's result, bit for bit, is the same alone and inside a batch of any size
at any position. Norms, activations and rotary run one row (token) per
program with a fixed reduction over the hidden dim, so they are; pinned here
(the attention kernels: tests/ops/attention/test_deterministic_attention.py).
The ops checked are the specs' ``batch_invariant`` ones (`OpSpec`), each with
its check below: an op declared invariant without one fails here."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton import ops
from kunlun_triton.ops.rope.spec import cos_sin_cache
from kunlun_triton.ops.spec import all_specs, specs_where

ROWS, HIDDEN = 13, 96


def _rows(seed, width=HIDDEN):
    return torch.randn(ROWS, width, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def _assert_row_invariant(run, *inputs):
    """run(*row-sliced inputs) for every row alone equals its row of the batched call."""
    batched = run(*(t.clone() for t in inputs))
    for i in (0, 5, ROWS - 1):
        alone = run(*(t[i : i + 1].clone() for t in inputs))
        assert torch.equal(alone[0], batched[i]), f"row {i}"


def _norm(dtype):
    weight = _rows(1)[0].to(dtype)
    x = _rows(2).to(dtype)
    _assert_row_invariant(lambda a: ops.rms_norm(a, weight), x)


def _fused_norm(dtype):
    weight = _rows(1)[0].to(dtype)
    x, residual = _rows(2).to(dtype), _rows(3).to(dtype)

    def fused(a, r):
        out = ops.fused_add_rms_norm(a, r, weight)
        return torch.cat([out, r], dim=-1)  # the output and the updated residual

    _assert_row_invariant(fused, x, residual)


def _activation(op):
    return lambda dtype: _assert_row_invariant(getattr(ops, op), _rows(4, 2 * HIDDEN).to(dtype))


def _rotary(dtype):
    heads, head_dim = 2, 32
    cache = cos_sin_cache(head_dim, 64, 10000.0, torch.float32, DEVICE)
    positions = torch.randint(0, 64, (ROWS,), generator=torch.Generator().manual_seed(5)).to(DEVICE)

    def rotate(pos, q, k):
        ops.rotary_embedding(pos, q, k, head_dim, cache, True)
        return torch.cat([q, k], dim=-1)

    _assert_row_invariant(rotate, positions, _rows(6, heads * head_dim), _rows(7, head_dim))


# Per op; a family whose ops share a signature checks them alike (a new
# activation op is covered by declaring it batch_invariant).
CHECKS = {"rms_norm": _norm, "fused_add_rms_norm": _fused_norm, "rotary_embedding": _rotary}
FAMILY_CHECKS = {"activation": _activation}
SPECS = all_specs()


def _check_of(op):
    return CHECKS.get(op) or (FAMILY_CHECKS[SPECS[op].family](op) if SPECS[op].family in FAMILY_CHECKS else None)

# (op, dtypes): norms in fp32 and bf16 (the bf16 rounding of the sum), the others in fp32.
CASES = [(op, dtype) for op in specs_where(lambda spec: spec.batch_invariant)
         for dtype in ((torch.float32, torch.bfloat16) if op.endswith("rms_norm") else (torch.float32,))]  # fmt: skip


@pytest.mark.parametrize("op, dtype", CASES)
def test_op_is_row_invariant(op, dtype):
    check = _check_of(op)
    assert check is not None, f"{op}: its spec says batch_invariant but this file has no check for it"
    check(dtype)


def test_every_check_is_of_an_op_declared_invariant():
    declared = specs_where(lambda spec: spec.batch_invariant)
    assert set(CHECKS) <= set(declared)
    assert {SPECS[op].family for op in declared if op not in CHECKS} <= set(FAMILY_CHECKS)
