"""MLA decode reads each latent tile once (issue 24): V is the transposed K
tile already loaded (V_IN_K) exactly when V is the latent part of K's rows,
as SGLang's MLA pool hands it over; any other V is loaded as usual. Answers
against the torch reference either way; and the shipped Kunlun configs at
MLA dims compile for sm_90 (the proxy for its local memory) without spills."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.paged import decode_batch
from kunlun_triton.introspect.sass import kernel_cost
from kunlun_triton.ops import decode_attention
from kunlun_triton.ops.attention import reference as attention_reference
from kunlun_triton.ops.attention.shared import latent_view
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.runtime import Target, targeting
from kunlun_triton.testing import LOWERING_TARGETS, assert_close

LATENT, ROPE = 512, 64
SM90 = Target("cuda", "sm_90", "meta", "test")
MLA = {"batch": 4, "context_len": 2000, "q_heads": 16, "kv_heads": 1, "head_dim": LATENT + ROPE, "v_head_dim": LATENT}


def _mla_batch(seed):
    b = decode_batch([3, 70, 33], q_heads=16, kv_heads=1, head_dim=LATENT + ROPE, v_head_dim=LATENT,
                     dtype=torch.float16, seed=seed, device=DEVICE)  # fmt: skip
    b.sm_scale = 192**-0.5
    return b


def test_latent_view_is_recognised_and_nothing_else():
    k = torch.randn(10, 1, 576)
    assert latent_view(k, k[..., :512])
    assert not latent_view(k, k[..., 64:])  # same storage, another offset: not K's first values
    assert not latent_view(k, k[..., :512].clone())
    meta = torch.empty(10, 1, 576, device="meta")
    assert latent_view(meta, meta[..., :512]) and not latent_view(meta, torch.empty(10, 1, 512, device="meta"))


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_latent_once_matches_the_reference(formulation, splits):
    b = _mla_batch(21)
    b.pool.v_buffer = b.pool.k_buffer[..., :LATENT]
    out = decode_attention(*b.args(), num_kv_splits=splits, formulation=formulation)
    assert_close(out, attention_reference.decode_attention(*b.args(), **b.kwargs()), scale=2)


def test_a_v_at_another_offset_is_still_loaded_as_v():
    """V = K[..., 64:] shares K's storage but not its first values: taking it
    from the K tile would be wrong, so the kernel must load it."""
    b = _mla_batch(22)
    b.pool.v_buffer = b.pool.k_buffer[..., ROPE:]
    out = decode_attention(*b.args(), num_kv_splits=2)
    assert_close(out, attention_reference.decode_attention(*b.args(), **b.kwargs()), scale=2)


def test_the_planned_mla_launch_takes_v_from_k():
    with targeting(SM90):
        partial = planned_kernels("decode_attention", MLA, torch.bfloat16, SM90)[0]
        plain = planned_kernels("decode_attention", {**MLA, "head_dim": 128, "v_head_dim": 128}, torch.bfloat16,
                                SM90)[0]  # fmt: skip
    assert partial.constexprs["V_IN_K"] is True and plain.constexprs["V_IN_K"] is False


@pytest.mark.lowering
def test_kunlun_mla_configs_do_not_spill_on_sm90():
    kunlun = next(t for t in LOWERING_TARGETS if t.name == "kunlun")
    shapes = {"decode_attention": MLA,
              "extend_attention": {"batch": 2, "prefix_len": 500, "extend_len": 300, "q_heads": 16, "kv_heads": 1,
                                   "head_dim": LATENT + ROPE, "v_head_dim": LATENT}}  # fmt: skip
    specs = [s for op, shape in shapes.items() for s in planned_kernels(op, shape, torch.float16, kunlun)]
    assert {s.name for s in specs} == {"decode_partial_kernel", "decode_merge_kernel", "extend_kernel"}
    for result in compile_ahead_of_time(specs, targets=("cuda",), artifacts=True):
        assert result["ok"], result.get("error")
        assert kernel_cost(result)["spill_bytes"] == 0, (result["spec"].label, kernel_cost(result))
