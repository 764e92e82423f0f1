"""Our decode and extend kernels against SGLang 0.5.23's, as compiled for
sm_90 (Llama-3-8B layer, bf16), planned by each side's own launcher: the
cost properties issue 11 asks for are pinned here (instruction counts are a
property of the code and the compiler, not a timing).

Also: our host mirror of SGLang's per-request split heuristic agrees with
SGLang's own kernel for it."""

import pytest
import torch

from kunlun_triton.ops.spec import all_specs
from kunlun_triton.runtime import Target, targeting
from kunlun_triton.sglang_plugin.tools.baselines import programs_baselines, traffic_baselines
from kunlun_triton.sglang_plugin.tools.baselines.attention import sglang_num_kv_splits
from kunlun_triton.tools.inspect_kernels import inspect_ops, resolve_preset

SM90 = Target("cuda", "sm_90", "meta", "test")


@pytest.fixture(scope="module")
def report():
    return inspect_ops(["decode_attention", "extend_attention"], SM90, resolve_preset("llama-3-8b"), torch.bfloat16,
                       batch=1, context=4096, compare=("sglang",))  # fmt: skip


def _kernel(report, op, impl, index=0):
    return [k for k in report["ops"][op]["kernels"] if k["impl"] == impl][index]


def test_decode_main_loop_costs_no_more_than_sglangs(report):
    ours, theirs = _kernel(report, "decode_attention", "ours"), _kernel(report, "decode_attention", "sglang")
    assert (ours["kernel"], theirs["kernel"]) == ("decode_partial_kernel", "_fwd_grouped_kernel_stage1")
    assert ours["spill_bytes"] == 0 and ours["regs"] <= theirs["regs"], (ours, theirs)
    assert ours["sass_per_item"] <= 1.05 * theirs["sass_per_item"], (ours, theirs)


def test_extend_loops_cost_no_more_than_sglangs_per_key(report):
    ours, theirs = _kernel(report, "extend_attention", "ours"), _kernel(report, "extend_attention", "sglang")
    assert ours["spill_bytes"] == 0
    # ours: prefix whole tiles, prefix ragged tile, causal whole tiles, causal diagonal,
    # then the same four again screening hidden values (the rerun of a block
    # that came out NaN); SGLang: prefix, causal (every tile masked). Same BLOCK_N (64).
    assert ours["items_per_loop"] == theirs["items_per_loop"]
    assert len(ours["loops"]) == 8, ours["loops"]
    prefix, ragged, causal, diagonal = ours["loops"][:4]
    their_prefix, their_causal = theirs["loops"]
    assert prefix <= their_prefix and ragged <= their_causal, (ours["loops"], theirs["loops"])
    assert causal <= their_causal and diagonal <= their_causal, (ours["loops"], theirs["loops"])


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_pool_against_sglangs_fp8_path(kv_dtype):
    """``--shape kv_dtype=fp8_*``: SGLang's kernels planned over the fp8 pool
    its backend hands them (fp8 K / V pointers), both sides' bytes one per
    cached value (K and V: 2 x 4096 x 8 x 128 fewer than the bf16 pool's, an
    independent count), and on sm_90 our loops read the pool with the
    target's own conversion: decode within 1.15x of SGLang's fp8 x fp8 loop
    per key (the integer codec was 2.2x), extend's prefix loop below its."""
    shapes = {kv: inspect_ops(["decode_attention", "extend_attention"], SM90, resolve_preset("llama-3-8b"),
                              torch.bfloat16, batch=1, context=4096, compare=("sglang",), traffic=True,
                              overrides={"kv_dtype": [kv]}) for kv in ("auto", kv_dtype)}  # fmt: skip
    fp8 = shapes[kv_dtype]
    for impl in ("ours", "sglang"):
        saved = shapes["auto"]["ops"]["decode_attention"]["bytes_per_call"][impl] \
            - fp8["ops"]["decode_attention"]["bytes_per_call"][impl]  # fmt: skip
        assert saved == 2 * 4096 * 8 * 128, (impl, saved)
    theirs = _kernel(fp8, "decode_attention", "sglang")
    their_bf16 = _kernel(shapes["auto"], "decode_attention", "sglang")
    assert theirs["kernel"] == "_fwd_grouped_kernel_stage1"
    assert theirs["sass_per_item"] > their_bf16["sass_per_item"]  # its fp8 path compiled (q cast, fp8 dots)
    ours = _kernel(fp8, "decode_attention", "ours")
    assert ours["constexprs"]["KV_FORMAT"] in (3, 4) and ours["spill_bytes"] == 0
    assert ours["sass_per_item"] <= 1.15 * theirs["sass_per_item"], (ours, theirs)
    ours, theirs = _kernel(fp8, "extend_attention", "ours"), _kernel(fp8, "extend_attention", "sglang")
    assert ours["spill_bytes"] == 0 and ours["loops"][0] <= theirs["loops"][0], (ours["loops"], theirs["loops"])


ROWS = [(1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 16384), (8, 1024), (8, 32768), (32, 1024), (64, 4096),
        (256, 1024)]  # fmt: skip


@pytest.mark.parametrize("batch, context", ROWS)
def test_decode_moves_at_most_2_percent_more_bytes(batch, context):
    shape = {"batch": batch, "context_len": context, "q_heads": 32, "kv_heads": 8, "head_dim": 128}
    with targeting(SM90):
        ours = all_specs(("attention",))["decode_attention"].traffic(shape, torch.bfloat16)
    theirs = traffic_baselines()["decode_attention"](shape, torch.bfloat16)
    assert ours <= 1.02 * theirs, (ours, theirs)


@pytest.mark.parametrize("batch, context", ROWS)
def test_decode_runs_at_least_sglangs_stage1_programs(batch, context):
    """Issue 24: the split policy fills an H200 at least as SGLang's backend
    does (its heuristic for 132 SMs, `programs_baselines`), at every row."""
    shape = {"batch": batch, "context_len": context, "q_heads": 32, "kv_heads": 8, "head_dim": 128}
    with targeting(SM90):
        ours = all_specs(("attention",))["decode_attention"].programs(shape, torch.bfloat16)
    theirs = programs_baselines()["decode_attention"](shape, torch.bfloat16)
    assert ours >= theirs, (ours, theirs)


def test_programs_baseline_counts_sglangs_split_kernel_grid():
    """SGLang's stage-1 programs with work = its grouped kernel's head blocks
    x the splits its heuristic gives (here its own kernel's counts)."""
    from sglang.kernels.ops.attention.metadata import get_num_kv_splits_triton

    theirs = torch.empty(8, dtype=torch.int32)
    get_num_kv_splits_triton[(1,)](theirs, torch.full((8,), 1024, dtype=torch.int32), 8, 1, 32, 8, 8, 132,
                                   MAX_NUM_SEQ=256)  # fmt: skip
    shape = {"batch": 8, "context_len": 1024, "q_heads": 32, "kv_heads": 8, "head_dim": 128}
    assert programs_baselines()["decode_attention"](shape, torch.bfloat16) == 8 * int(theirs.sum())  # 32 / 4 blocks


MLA = {"batch": 4, "context_len": 4096, "q_heads": 16, "kv_heads": 1, "head_dim": 576, "v_head_dim": 512}


def test_mla_decode_against_sglangs_has_mla_path():
    """Issue 24: the latent is read once per tile as SGLang's HAS_MLA path
    reads it (bytes of K/V per key within 5%), and the merge's registers at
    MLA dims are at most 2x SGLang's; no spills."""
    report = inspect_ops(["decode_attention"], SM90, resolve_preset("llama-3-8b"), torch.bfloat16,
                         overrides={k: [v] for k, v in MLA.items() if k not in ("batch", "context_len")},
                         batch=4, context=4096, compare=("sglang",))  # fmt: skip
    partial, merge = (_kernel(report, "decode_attention", "ours", i) for i in (0, 1))
    their_partial, their_merge = (_kernel(report, "decode_attention", "sglang", i) for i in (0, 1))
    assert their_partial["constexprs"].get("HAS_MLA") is True and partial["constexprs"]["V_IN_K"] is True
    assert merge["regs"] <= 2 * their_merge["regs"], (merge, their_merge)
    assert partial["spill_bytes"] == merge["spill_bytes"] == 0
    assert partial["sass_per_item"] <= their_partial["sass_per_item"], (partial, their_partial)
    # The K/V stream per key in each side's bytes model: a one-key call (one
    # split each side) less its q rows, partials and o, which are the same.
    from kunlun_triton.ops.attention.decode_splits import decode_traffic

    one = {**MLA, "batch": 1, "context_len": 1}
    with targeting(SM90):
        ours = all_specs(("attention",))["decode_attention"].traffic(one, torch.bfloat16)
    theirs = traffic_baselines()["decode_attention"](one, torch.bfloat16)
    per_call = decode_traffic([0], 16, 1, 576, 512, 2, [1])
    assert ours - per_call == 576 * 2 + 4  # the latent + rope row once and an int32 slot id: no V row
    assert ours - per_call <= 1.05 * (theirs - per_call), (ours, theirs)


@pytest.mark.parametrize("lens", [[1], [7, 4000, 120], [16384], [900] * 64, list(range(1, 300, 7))])
@pytest.mark.parametrize("heads, kv_heads", [(32, 8), (32, 32)])
def test_split_heuristic_mirror_matches_sglangs_kernel(lens, heads, kv_heads):
    from sglang.kernels.ops.attention.metadata import get_num_kv_splits_triton

    seq_lens = torch.tensor(lens, dtype=torch.int32)
    theirs = torch.empty(len(lens), dtype=torch.int32)
    get_num_kv_splits_triton[(1,)](theirs, seq_lens, len(lens), 1, heads, kv_heads, 8, 132,
                                   MAX_NUM_SEQ=max(256, 1 << (len(lens) - 1).bit_length()))  # fmt: skip
    assert sglang_num_kv_splits(lens, heads, kv_heads, 8, 132) == theirs.tolist()


def test_fused_experts_compare_shows_sglangs_fused_moe_kernel():
    """`inspect fused_experts --compare sglang`: SGLang's W13 and W2
    fused_moe_kernel rows as its runner launches them on an H200 (issue 24):
    tiles and launch options of its shipped tuned file for Qwen3-30B-A3B's
    experts (E=128, N=768), the entry for one token, compiled."""
    import json
    from pathlib import Path

    import sglang.srt.layers.moe.moe_runner.triton_utils as triton_utils

    files = sorted(Path(triton_utils.__file__).parent.glob("configs/triton_*/E=128,N=768,device_name=NVIDIA_H200.json"),
                   key=lambda f: tuple(int(x) for x in f.parent.name[len("triton_"):].split("_")))  # fmt: skip
    expected = json.loads(files[-1].read_text())["1"]  # newest Triton's file (SGLang falls back newest-first)
    report = inspect_ops(["fused_experts"], SM90, resolve_preset("qwen3-30b-a3b"), torch.bfloat16, batch=1,
                         compare=("sglang",))  # fmt: skip
    rows = report["ops"]["fused_experts"]["kernels"]
    theirs = [k for k in rows if k["impl"] == "sglang"]
    assert [k["kernel"] for k in theirs] == ["fused_moe_kernel", "fused_moe_kernel"]
    assert all("error" not in k and k["regs"] > 0 and k["spill_bytes"] == 0 for k in theirs), theirs
    for row in theirs:  # no _down file ships for it: W2 reuses W13's config
        assert {k: row["constexprs"][k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")} == {
            k: expected[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")}
        assert (row["num_warps"], row["num_stages"]) == (expected["num_warps"], expected["num_stages"])


def test_mla_extend_moves_the_latent_once():
    """Issue 24: MLA's absorbed extend reads the latent once per (program,
    key), V taken from the K tile; SGLang's extend loads K and V (and int64
    slot ids). At the same row tile (32 on sm_90) that is (576 x 2 + 4) /
    ((576 + 512) x 2 + 8) = 0.53 of its bytes per prefix key; q, o and the
    new keys bring the call to about 0.55."""
    shape = {"batch": 2, "prefix_len": 2048, "extend_len": 256, "q_heads": 16, "kv_heads": 1, "head_dim": 576,
             "v_head_dim": 512, "custom_mask": False}  # fmt: skip
    with targeting(SM90):
        ours = all_specs(("attention",))["extend_attention"].traffic(shape, torch.bfloat16)
        theirs = traffic_baselines()["extend_attention"](shape, torch.bfloat16)
    assert ours <= 0.6 * theirs, (ours, theirs)


def test_every_baseline_a_spec_names_is_sglangs_function_there():
    """`OpSpec.sglang_baselines` says which baselines exist; the tables the
    tools read are built from them and hold a callable per declared op."""
    from kunlun_triton.ops.spec import BASELINE_SUFFIXES, with_baseline
    from kunlun_triton.sglang_plugin.tools import baselines

    for kind in BASELINE_SUFFIXES:
        table = getattr(baselines, "bench_baselines" if kind == "bench" else f"{kind}_baselines")()
        assert set(table) == set(with_baseline(kind)), kind
        assert all(callable(fn["sglang"] if kind == "bench" else fn) for fn in table.values()), kind
    assert set(with_baseline("bench")) >= {"decode_attention", "extend_attention"}
