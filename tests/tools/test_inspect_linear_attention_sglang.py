"""Our gated-delta-net kernels against SGLang 0.5.23's FLA kernels for the
same jobs, compiled for sm_90 at Qwen3-Next-80B-A3B's dims (16 key heads,
32 value heads, head dims 128, bf16, fp32 state), each side planned by its
own launcher (`kunlun-triton inspect linear_attention --compare sglang`):
what issue 40 asks of the decode's and the prefill's cost is pinned here
(instruction counts and bytes are properties of the code and the compiler,
not timings; docs/linear-attention-cost.md): SGLang's prefill chain is the
one its backend runs, ours (both of its kernels) executes no more
warp-instructions per token than that whole chain and spills nothing, and
compilations stay at most two per kernel."""

import pytest
import torch

from kunlun_triton.introspect.sass import executed_per_program
from kunlun_triton.runtime import Target
from kunlun_triton.tools.inspect_kernels import inspect_ops, resolve_preset

SM90 = Target("cuda", "sm_90", "meta", "test")
OPS = ["gated_delta_rule_decode", "gated_delta_rule_prefill", "causal_conv1d_update"]
BATCH = 64
# an independent count of the floor: each request's state [32, 128, 128] fp32 read
# once and written once, q and k [16, 128], v and o [32, 128] bf16, a and b [32] bf16
FLOOR_PER_TOKEN = 2 * 32 * 128 * 128 * 4 + 2 * (2 * 16 * 128 + 2 * 32 * 128 + 2 * 32)


@pytest.fixture(scope="module")
def report():
    return inspect_ops(OPS, SM90, resolve_preset("llama-3-8b"), torch.bfloat16, batch=BATCH, compare=("sglang",),
                       traffic=True, compilations=True)  # fmt: skip


def _rows(report, op, impl):
    return [k for k in report["ops"][op]["kernels"] if k["impl"] == impl]


def test_decode_no_worse_than_flas_fused_sigmoid_gating_update(report):
    (ours,), (theirs,) = _rows(report, OPS[0], "ours"), _rows(report, OPS[0], "sglang")
    assert (ours["kernel"], theirs["kernel"]) == ("gdn_decode_kernel", "fused_sigmoid_gating_delta_rule_update_kernel")
    # SGLang's launch on sm_90: 32 value columns, one warp, PDL, the split (N, HV) grid
    assert theirs["constexprs"]["BV"] == 32 and theirs["num_warps"] == 1 and theirs["constexprs"]["SPLIT_N_HV_GRID"]
    assert "error" not in ours and "error" not in theirs, (ours, theirs)
    assert ours["spill_bytes"] == 0 and ours["regs"] <= theirs["regs"], (ours, theirs)
    assert ours["sass_per_token"] <= theirs["sass_per_token"], (ours, theirs)
    per_token = report["ops"][OPS[0]]["sass_per_token"]
    assert per_token["ours"] <= per_token["sglang"], per_token


def test_decode_bytes_within_2_percent_of_the_floor_and_no_more_than_flas(report):
    moved = report["ops"][OPS[0]]["bytes_per_call"]
    assert moved["ours"] <= moved["sglang"], moved
    assert FLOOR_PER_TOKEN * BATCH <= moved["ours"] <= 1.02 * FLOOR_PER_TOKEN * BATCH, (moved, FLOOR_PER_TOKEN)


def test_prefill_compares_against_sglangs_chunked_chain(report):
    ours, theirs = _rows(report, OPS[1], "ours"), _rows(report, OPS[1], "sglang")
    assert [k["kernel"] for k in ours] == ["gdn_prefill_chunk_kernel", "gdn_prefill_state_kernel"]
    assert [k["kernel"] for k in theirs] == [
        "fused_gdn_gating_kernel", "l2norm_fwd_kernel", "l2norm_fwd_kernel", "chunk_local_cumsum_scalar_kernel",
        "chunk_gated_delta_rule_fwd_kkt_solve_kernel", "recompute_w_u_fwd_kernel",
        "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "chunk_fwd_kernel_o"]  # fmt: skip
    assert all("error" not in k and k["spill_bytes"] == 0 for k in theirs), theirs
    assert set(report["ops"][OPS[1]]["sass_per_token"]) == {"ours", "sglang"}  # every kernel counted


def test_prefill_no_worse_than_flas_chunked_chain(report):
    """Issue 40's prefill target at 512 tokens: every kernel of ours counted
    (the per-(chunk, head) solve and the state pass) against FLA's eight."""
    ours = _rows(report, OPS[1], "ours")
    assert all("error" not in k and k["spill_bytes"] == 0 for k in ours), ours
    assert all(k["sass_per_token"] is not None and k["occupancy"] >= 1 for k in ours), ours  # smem fits sm_90
    per_token = report["ops"][OPS[1]]["sass_per_token"]
    assert per_token["ours"] == sum(k["sass_per_token"] for k in ours), per_token
    assert per_token["ours"] <= per_token["sglang"], per_token


def test_conv_update_no_worse_than_sglangs_triton_kernel(report):
    (ours,), (theirs,) = _rows(report, OPS[2], "ours"), _rows(report, OPS[2], "sglang")
    assert theirs["kernel"] == "_causal_conv1d_update_kernel"
    assert ours["spill_bytes"] == 0 and ours["regs"] <= theirs["regs"], (ours, theirs)
    assert ours["sass_total"] <= theirs["sass_total"], (ours, theirs)


def test_one_compilation_per_kernel_over_a_generation(report):
    for op in OPS:
        counts = report["ops"][op]["compilations"]["ours"]
        assert counts and all(n <= 2 for n in counts.values()), (op, counts)


def test_executed_count_weights_each_loop_body_by_its_trips():
    """A hand-made listing: 100 instructions, an outer loop of 40 holding an
    inner one of 10; 3 outer trips, 12 inner in all: 60 + 3 x 30 + 12 x 10."""
    cost = {"sass_total": 100, "loops": [{"start": 10, "end": 50, "instructions": 40},
                                         {"start": 20, "end": 30, "instructions": 10}]}  # fmt: skip
    assert executed_per_program(cost, (3, 12)) == 60 + 90 + 120
    assert executed_per_program(cost, (3,)) is None  # a loop without its trips: no guess


def test_pinned_kkt_config_is_flas_cheapest_candidate():
    """With no card FLA's autotuner cannot pick its kkt + solve config; the
    plan takes the candidate with the fewest executed instructions per token
    (spills counted as a loss): the comparison most favourable to FLA."""
    from kunlun_triton.introspect import compile_ahead_of_time
    from kunlun_triton.introspect.sass import kernel_cost
    from kunlun_triton.runtime import targeting
    from kunlun_triton.sglang_plugin.tools.baselines import linear_attention as la
    from kunlun_triton.tools.inspect_kernels import _per_token

    shape = {"lengths": (512,)}
    candidates = [{"BK": bk, "num_warps": w} for bk in (32, 64) for w in (1, 2, 4)]
    with targeting(SM90):
        specs = [next(s for s in la.gated_delta_rule_prefill_inspect_specs(shape, torch.bfloat16, c) if "kkt" in s.name)
                 for c in candidates]  # fmt: skip
    results = compile_ahead_of_time([(s, "cuda") for s in specs], artifacts=True)
    assert all(r["ok"] for r in results), [r.get("error") for r in results]
    costs = {(c["BK"], c["num_warps"]): kernel_cost(r) for c, r in zip(candidates, results)}
    counted = {key: _per_token(spec, cost) for (key, cost), spec in zip(costs.items(), specs)}
    unspilled = {key: n for key, n in counted.items() if costs[key]["spill_bytes"] == 0 and n is not None}
    assert min(unspilled, key=unspilled.get) == (la.KKT_CONFIG["BK"], la.KKT_CONFIG["num_warps"]), counted
