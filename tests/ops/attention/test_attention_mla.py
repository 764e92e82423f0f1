"""MLA shapes (DeepSeek-V2/V3: one latent KV head of kv_lora_rank 512 + rope 64
= 576 for all q heads, V the first 512 values of the same cache row, a
strided view) in decode_attention and extend_attention, against the torch
reference; the 576 head dim runs as a 512 tile plus a 64 tile (never
padded to 1024), as SGLang's MLA decode kernel splits it; and those launches
lower ahead of time for every target at 16 and 128 q heads."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.introspect.sass import kernel_cost
from kunlun_triton.ops import decode_attention, extend_attention
from kunlun_triton.ops.attention import reference as attention_reference
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.testing import LOWERING_TARGETS, aot_target, assert_close, assert_lowers

LATENT, ROPE = 512, 64
HEAD_DIM = LATENT + ROPE


def _latent_view(batch_pool):
    """V as SGLang's MLA pool hands it over: the latent part of the K rows."""
    batch_pool.v_buffer = batch_pool.k_buffer[..., :LATENT]
    assert not batch_pool.v_buffer.is_contiguous()


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_mla_decode_at_deepseek_dims(formulation):
    batch = decode_batch([5, 37], q_heads=16, kv_heads=1, head_dim=HEAD_DIM, v_head_dim=LATENT,
                         dtype=torch.float16, page_size=1, seed=11, device=DEVICE)  # fmt: skip
    _latent_view(batch.pool)
    batch.sm_scale = 192**-0.5  # DeepSeek scales by the un-absorbed q.k dim (128 + 64)
    out = decode_attention(*batch.args(), num_kv_splits=2, formulation=formulation)
    assert out.shape == (2, 16, LATENT)
    assert_close(out, attention_reference.decode_attention(*batch.args(), **batch.kwargs()), scale=2)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_mla_extend_over_a_cached_prefix_at_deepseek_dims(formulation):
    b = extend_batch([9, 0], [5, 12], q_heads=16, kv_heads=1, head_dim=HEAD_DIM, v_head_dim=LATENT,
                     dtype=torch.float16, seed=12, device=DEVICE)  # fmt: skip
    _latent_view(b.pool)
    b.v_extend = b.k_extend[..., :LATENT]
    out = extend_attention(*b.args(), formulation=formulation)
    assert_close(out, attention_reference.extend_attention(*b.args(), **b.kwargs()), scale=2)


def _mla_shapes(q_heads):
    heads = {"q_heads": q_heads, "kv_heads": 1, "head_dim": HEAD_DIM, "v_head_dim": LATENT}
    return {"decode_attention": {"batch": 4, "context_len": 2000, **heads},
            "extend_attention": {"batch": 2, "prefix_len": 500, "extend_len": 300, **heads}}  # fmt: skip


@pytest.mark.lowering
@pytest.mark.parametrize("q_heads", [16, 128])
def test_mla_launches_split_576_into_512_plus_64_and_lower(q_heads):
    """Every target's plan lowers; with 128 heads decode runs 8 programs of 16
    heads per kv head and split (MAX_BLOCK_H)."""
    jobs, cuda_plans = [], set()
    for target in LOWERING_TARGETS:
        for op, shape in _mla_shapes(q_heads).items():
            for spec in planned_kernels(op, shape, torch.bfloat16, target):
                if target.name == "cuda":
                    cuda_plans.add(spec.label)
                if "BLOCK_D" in spec.constexprs:
                    assert (spec.constexprs["BLOCK_D"], spec.constexprs["BLOCK_DPE"]) == (LATENT, ROPE), spec.label
                    assert spec.constexprs["HEAD_DIM"] == HEAD_DIM and spec.constexprs["V_DIM"] == LATENT
                if "HEAD_BLOCKS" in spec.constexprs:
                    assert spec.constexprs["HEAD_BLOCKS"] * spec.constexprs["BLOCK_H"] == q_heads, spec.label
                jobs.append((spec, aot_target(target)))
    if q_heads == 128:
        assert_lowers(jobs)
        return
    # 16 heads: sm_90's plans (cuda-sm_90.yaml) also keep everything in registers
    results = compile_ahead_of_time(jobs, artifacts=True)
    for result in results:
        assert result["ok"], f"{result['spec'].label} on {result['target']}: {result.get('error')}"
    sm90 = [r for r in results if r["target"] == "cuda" and r["spec"].label in cuda_plans]
    assert sm90
    for result in sm90:
        cost = kernel_cost(result)
        assert cost["spill_bytes"] == 0, f"{result['spec'].label}: {cost}"


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_decode_group_larger_than_a_head_block(formulation):
    """A group of 20 q heads per kv head (MAX_BLOCK_H 16): two head blocks per
    kv head, the second one ragged; head dim 80 runs as 64 + 16."""
    batch = decode_batch([7, 30], q_heads=40, kv_heads=2, head_dim=80, dtype=torch.float32, seed=13, device=DEVICE)
    out = decode_attention(*batch.args(), num_kv_splits=3, formulation=formulation)
    assert_close(out, attention_reference.decode_attention(*batch.args(), **batch.kwargs()))
