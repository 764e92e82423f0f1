"""The linear-attention kernels (and gated_rms_norm) lower ahead of time for
CUDA sm_90 and HIP gfx942 at Qwen3-Next-80B-A3B's dims (16 key heads, 32
value heads, head dims 128, bf16 inputs, fp32 state), as the launchers plan
them, and spill nothing: decode, the convolutions, the norm, the split of the
input projections (both layouts), and the prefill's sum formulation, each also
as Kunlun's configs plan it (sm_90 standing in for Kunlun's local memory). The
prefill's dot formulation (both of its kernels) lowers on both targets and
spills nothing under whichever Triton runs this (the kernels' 3.9 and SGLang's
3.8): on sm_90 in chunks of 64 (the state pass's bf16 workspace: with fp32
tiles it spilled 128 bytes under 3.9), on gfx942 in chunks of 16 (at 64 its
chunk kernel spills 552 bytes: hip-gfx942.yaml)."""

import pytest
import torch

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.sass import kernel_cost
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.runtime import Target

pytestmark = pytest.mark.lowering

SM90, GFX942 = Target("cuda", "sm_90", "cuda", "test"), Target("hip", "gfx942", "cuda", "test")
KUNLUN = Target("kunlun", "p800", "cuda", "test")
SHAPES = {"gated_delta_rule_decode": {"batch": 8}, "causal_conv1d": {"lengths": (100, 7)},
          "causal_conv1d_update": {"batch": 8}, "gated_rms_norm": {"rows": 64, "hidden_size": 128},
          "gdn_split_qkvzba": {"tokens": 100}}  # fmt: skip


def _costs(specs, targets):
    results = compile_ahead_of_time(specs, targets, artifacts=True)
    failed = [f"{r['spec'].label} on {r['target']}: {r['error']}" for r in results if not r["ok"]]
    assert not failed, failed
    return {(r["spec"].name, r["target"]): kernel_cost(r) for r in results}


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_kernels_lower_without_spills(op):
    for target, aot in ((SM90, "cuda"), (GFX942, "hip"), (KUNLUN, "cuda")):  # Kunlun's configs, sm_90 standing in
        specs = planned_kernels(op, SHAPES[op], torch.bfloat16, target)
        for (name, _), cost in _costs(specs, (aot,)).items():
            assert cost["spill_bytes"] == 0, (op, name, aot, cost)


def test_prefill_sum_formulation_as_kunlun_plans_it_does_not_spill():
    specs = planned_kernels("gated_delta_rule_prefill", {"lengths": (100, 7)}, torch.bfloat16, KUNLUN)
    assert [s.name for s in specs] == ["gdn_prefill_chunk_kernel", "gdn_prefill_state_kernel"]
    assert all(s.constexprs["USE_DOT"] is False for s in specs)
    for name, cost in _costs(specs, ("cuda",)).items():
        assert cost["spill_bytes"] == 0, (name, cost)


@pytest.mark.parametrize("target, aot, chunk", [(SM90, "cuda", 64), (GFX942, "hip", 16)], ids=["sm_90", "gfx942"])
def test_prefill_dot_formulation_lowers_without_spills(target, aot, chunk):
    """Chunks of 64 on sm_90; of 16 on gfx942, where 64 spills 552 bytes (hip-gfx942.yaml)."""
    specs = planned_kernels("gated_delta_rule_prefill", {"lengths": (100, 7)}, torch.bfloat16, target)
    assert len(specs) == 2 and all(s.constexprs["USE_DOT"] is True and s.constexprs["CHUNK"] == chunk for s in specs)
    for name, cost in _costs(specs, (aot,)).items():
        assert cost["spill_bytes"] == 0, (name, aot, cost)


@pytest.mark.parametrize("op, shape", [("gated_delta_rule_decode", {"batch": 8}), ("causal_conv1d_update", {"batch": 8}),
                                       ("gated_delta_rule_prefill", {"lengths": (100, 7)})])  # fmt: skip
def test_snapshot_variants_lower_without_spills_on_sm90(op, shape):
    """HAS_TRACK (SGLang's extra_buffer snapshots written by the kernels: test_state_snapshots)
    adds a store, not a spill: the plain variants' pins hold for it."""
    from dataclasses import replace

    specs = [replace(s, constexprs={**s.constexprs, "HAS_TRACK": True})
             for s in planned_kernels(op, shape, torch.bfloat16, SM90) if "HAS_TRACK" in s.constexprs]  # fmt: skip
    assert specs, op
    for name, cost in _costs(specs, ("cuda",)).items():
        assert cost["spill_bytes"] == 0, (op, name, cost)


@pytest.mark.parametrize("layout", ["interleaved", "contiguous"])
def test_split_lowers_in_both_layouts_and_for_an_odd_group(layout):
    """Qwen3.5's layout, and 3 value heads a key head (G V = 384 columns: three 128-wide tiles)."""
    for shape in ({"tokens": 1, "layout": layout}, {"tokens": 7, "layout": layout, "value_heads": 48}):
        for target, aot in ((SM90, "cuda"), (GFX942, "hip")):
            for (name, _), cost in _costs(planned_kernels("gdn_split_qkvzba", shape, torch.bfloat16, target),
                                          (aot,)).items():  # fmt: skip
                assert cost["spill_bytes"] == 0, (shape, name, aot, cost)
