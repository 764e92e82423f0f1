"""The decode split policy fills each target's device (issue 24): programs
per unit from the target's config times its SM / CU / cluster count from the
capability profile, per request on the device, without new compilations."""

import pytest
import torch

from kunlun_triton.ops.attention.decode_splits import _plan, decode_split_plan, head_programs, split_policy
from kunlun_triton.ops.attention.spec import decode_attention_programs
from kunlun_triton.runtime import Target, compute_units, targeting

SM90 = Target("cuda", "sm_90", "meta", "test")
GFX942 = Target("hip", "gfx942", "meta", "test")
P800 = Target("kunlun", "p800", "meta", "test")
LLAMA = {"q_heads": 32, "kv_heads": 8, "head_dim": 128}


@pytest.mark.parametrize("target, units", [(SM90, 132), (GFX942, 304), (P800, 12),
                                           (Target("cuda", "", "meta", "test"), 132)])  # fmt: skip
def test_compute_units_come_from_the_targets_profile(target, units):
    assert compute_units(target) == units
    with targeting(target):
        assert compute_units() == units


@pytest.mark.parametrize("target", [SM90, GFX942, P800])
def test_the_program_target_scales_with_the_unit_count(target, monkeypatch):
    """Same config, twice the units: the cap on splits at a batch that does
    not reach MAX_KV_SPLITS doubles (a figure per target, not a constant)."""
    with targeting(target):
        plan = _plan(None, torch.bfloat16, 128, 128, 4, None)
        batch = plan.target_programs  # one program per request and split: the cap is 1 or 2
        assert plan.target_programs % compute_units() == 0
        assert split_policy(plan, batch, 1)[1] == 1
        monkeypatch.setattr("kunlun_triton.ops.attention.shared.compute_units", lambda: 2 * compute_units())
        from kunlun_triton.ops.attention.decode_splits import _cached_plan

        twice = _cached_plan.uncached(torch.bfloat16, 128, 128, 4, None)
        assert twice.target_programs == 2 * plan.target_programs
        assert split_policy(twice, batch // 2, 1)[1] == min(4, plan.max_kv_splits)


def test_head_blocks_count_as_programs():
    """MLA's 128 q heads on one latent head run 8 blocks of 16 per split: the
    cap counts them, so 8x the heads do not make 8x the programs."""
    with targeting(SM90):
        plan = _plan(None, torch.bfloat16, 576, 512, 128, None)
        assert head_programs(plan, 128, 1) == 8
        assert decode_split_plan(4, 128, 1, 576, 512)[1] == split_policy(plan, 4, 8)[1]


# (batch, context): SGLang 0.5.23's stage-1 programs on an H200 at these
# (issue 24's table; tests/tools/test_inspect_sglang.py checks them against
# SGLang's own heuristic): ours must be at least as many.
SGLANG_H200 = {(1, 512): 64, (1, 1024): 64, (1, 2048): 64, (8, 1024): 512, (32, 1024): 768, (64, 4096): 1024,
               (256, 1024): 2048}  # fmt: skip


@pytest.mark.parametrize("batch, context", sorted(SGLANG_H200))
def test_sm90_runs_at_least_sglangs_programs(batch, context):
    with targeting(SM90):
        ours = decode_attention_programs({"batch": batch, "context_len": context, **LLAMA}, torch.bfloat16)
    assert ours >= SGLANG_H200[batch, context], ours
    # ... and not wastefully many: under one wave of 8 resident CTAs per SM plus one split per request
    assert ours < 8 * 132 + batch * 8, ours


def test_deterministic_tiles_ignore_the_device():
    """split_tile_size: splits follow the request's own length, whatever the units."""
    for target in (SM90, P800):
        with targeting(target):
            assert decode_split_plan(3, 32, 8, 128, 128, split_tile_size=256, max_context_len=4096) == (256, 16)
