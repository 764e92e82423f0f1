"""The interpreter's batched decode kernel (`ops/attention/decode_batch.py`):
one program over many (request, KV head) rows, against the torch reference.

Explicit configs put it through its corners: small key tiles (several
trips, a ragged last one, rows of different lengths in one program), few
rows per program (several programs, padding rows), every formulation,
dtype, GQA group, head dims that need masks, soft cap, sliding window, fp8
pools, empty requests. The default interpreter plan takes it too (see
test_dev_mode_plan.py).
"""

import importlib

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.introspect.paged import decode_batch
from kunlun_triton.ops import decode_attention, decode_workspace
from kunlun_triton.ops.attention import reference
from kunlun_triton.testing import assert_close

decode_batch_module = importlib.import_module("kunlun_triton.ops.attention.decode_batch")


@pytest.fixture
def grids(monkeypatch):
    """The grid of every launch of the batched kernel while the test runs."""
    seen, kernel = [], decode_batch_module.decode_batch_kernel
    real = kernel.run

    def run(*args, **kwargs):
        seen.append(kwargs["grid"])
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel, "run", run)
    return seen


def config(formulation, block_n=16, rows=4):
    return {"formulation": formulation, "BLOCK_N": block_n, "MAX_KV_SPLITS": 1, "BATCH_ROWS": rows}


def want(batch, **kw):
    return reference.decode_attention(*batch.args(), **batch.kwargs(), **kw)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads", [(9, 3), (4, 4), (8, 1)])
def test_rows_tiles_and_programs(grids, formulation, dtype, heads):
    lens = [37, 0, 70, 1, 16]  # an empty request, a one-key one, one whole tile, ragged tiles
    batch = decode_batch(lens, q_heads=heads[0], kv_heads=heads[1], head_dim=64, dtype=dtype, page_size=4,
                         seed=sum(heads), device=DEVICE)  # fmt: skip
    args = batch.args()
    args[3].fill_(7.0)  # stale values: every output row must be written, zeros for the empty request
    out = decode_attention(*args, **batch.kwargs(), config=config(formulation))
    rows = len(lens) * heads[1]
    assert grids == [(-(-rows // 4),)]
    assert torch.equal(out[1].cpu(), torch.zeros_like(out[1].cpu()))
    assert_close(out, want(batch), scale=2)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("head_dim, v_head_dim", [(80, None), (13, None), (32, 16), (192, 128)])
def test_masked_head_dims(grids, formulation, head_dim, v_head_dim):
    batch = decode_batch([9, 33, 20], q_heads=6, kv_heads=2, head_dim=head_dim, v_head_dim=v_head_dim,
                         dtype=torch.float16, seed=head_dim, device=DEVICE)  # fmt: skip
    out = decode_attention(*batch.args(), config=config(formulation, rows=64))
    assert grids == [(1,)]
    assert_close(out, want(batch), scale=2)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("logit_cap, window", [(0.0, 5), (0.0, 40), (30.0, None), (2.0, 7)])
def test_soft_cap_and_sliding_window(grids, formulation, logit_cap, window):
    batch = decode_batch([50, 3, 0, 21], q_heads=4, kv_heads=2, head_dim=32, dtype=torch.float32, seed=7,
                         logit_cap=logit_cap, sliding_window=window, device=DEVICE)  # fmt: skip
    out = decode_attention(*batch.args(), **batch.kwargs(), config=config(formulation))
    assert len(grids) == 1
    assert_close(out, want(batch), scale=2)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("fp8_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_pool(grids, formulation, fp8_dtype):
    batch = decode_batch([30, 0, 45], q_heads=4, kv_heads=2, head_dim=32, dtype=torch.bfloat16, seed=11,
                         page_size=4, device=DEVICE)  # fmt: skip
    k_scale, v_scale = 0.05, 2.5
    p = batch.pool
    p.k_buffer = (p.k_buffer.float().cpu() / k_scale).to(fp8_dtype).to(DEVICE)
    p.v_buffer = (p.v_buffer.float().cpu() / v_scale).to(fp8_dtype).to(DEVICE)
    out = decode_attention(*batch.args(), k_scale=k_scale, v_scale=v_scale, config=config(formulation))
    assert len(grids) == 1
    q, k, v, o, indptr, indices, sm_scale = batch.args()
    dequantized = (q, k.float() * k_scale, v.float() * v_scale, o, indptr, indices, sm_scale)
    assert_close(out, reference.decode_attention(*dequantized), scale=2)


def test_same_answer_as_the_split_kernel_and_unchecked(grids):
    """The default plan (a workspace, as SGLang's backend passes) against the
    split-KV kernel at one split, and with checks off."""
    batch = decode_batch([40, 1, 0, 21], q_heads=9, kv_heads=3, head_dim=64, dtype=torch.float32, seed=5,
                         device=DEVICE)  # fmt: skip
    workspace = decode_workspace(4, 9, 3, 64, 64, DEVICE)
    batched = decode_attention(*batch.args(), workspace=workspace)
    unchecked = decode_attention(*batch.args(), workspace=workspace, check=False)
    assert len(grids) == 2
    split_kv = {"formulation": "dot", "BLOCK_N": 128, "MAX_KV_SPLITS": 1, "DIRECT_SINGLE_SPLIT": 1, "BATCH_ROWS": 0}
    split = decode_attention(*batch.args(), config=split_kv)
    assert len(grids) == 2, "BATCH_ROWS 0 keeps the split-KV kernel"
    assert torch.equal(batched, unchecked)
    assert_close(batched, split)
    assert_close(batched, want(batch))
