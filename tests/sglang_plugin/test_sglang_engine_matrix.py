"""The supported-models matrix: a tiny random checkpoint of each architecture
(2 layers, vocabulary 512) served by ``sglang.Engine`` on the kunlun platform
(development mode), greedy tokens equal to HF transformers through the radix
cache (a shared prefix, then the same prompts again) and chunked prefill
(chunks of 16, a prompt over two chunks); every op in the scheduler's
dispatch report ran our Triton kernels; the options the platform cannot
serve are refused at start-up. Each architecture's README row is rendered
from these results (`kunlun_triton.tools.models_table`) and must match
(``KUNLUN_TRITON_UPDATE_README=1`` rewrites it).

Two oracles are adjusted, each proven needed (HF as published gives other
tokens): HF's default ``sdpa`` attention for Gemma-2 ignores the config's
``attn_logit_softcapping`` (its ``eager`` path, the reference one, applies
it, as SGLang's model and our kernels do), so Gemma-2 compares with HF in
eager mode. And SGLang 0.5.23 serves Mistral through its
Llama model, which has no sliding window, so SGLang (its own ``triton`` and
``torch_native`` backends as well) attends to the whole context where HF
masks beyond the window. The test proves the difference (HF with its
window gives other tokens for the long prompt) and compares with HF with
the window off, i.e. with what SGLang's model computes.

CI time: one engine per row (a start is about a minute on 2 cores); the
Llama row shares the engine of test_sglang_engine_llama.py and the Qwen2 row
that of test_sglang_engine_qwen2_tp.py (same options, `engines` cache).
MoE rows run on two ranks (each holding half of every expert's width);
`test_moe_models_on_one_rank` serves the same two MoE models on one."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from kt_models_table import README, check_or_write_row, kernels_since, op_calls, refusals
from kt_sglang_support import output_ids

from kunlun_triton.tools import models_table

CHUNK = 16  # chunked prefill smaller than the long prompt below
NEW = 4  # few decode steps: the interpreter makes each one slow


@dataclass(frozen=True)
class Row:
    arch: str  # tiny_model arch
    tp_size: int = 1
    options: dict = field(default_factory=dict)
    oracle: str = "HF transformers"
    hf_config_changes: dict = field(default_factory=dict)  # what SGLang's model computes, where it differs
    ops: tuple = ()  # ops this architecture must show besides the common ones


ROWS = [
    Row("llama", options={"page_size": 4}),  # test_sglang_engine_llama.py's engine
    Row("qwen3"),
    Row("qwen3_moe", tp_size=2, ops=("moe_topk", "fused_experts")),
    Row("mixtral", tp_size=2, ops=("moe_topk", "fused_experts")),
    Row("mistral", oracle="HF transformers, sliding window off (SGLang's Llama model has none)",
        hf_config_changes={"sliding_window": None}),
    Row("phi3"),
    Row("gemma2", oracle="HF transformers, eager attention (HF's default sdpa path drops Gemma-2's attention "
                         "soft-capping)",
        hf_config_changes={"attn_implementation": "eager"}, ops=("logit_softcap",)),
    Row("deepseek_v2", ops=("moe_topk", "fused_experts")),
    Row("gpt_oss", ops=("moe_topk", "fused_experts")),  # sinks, sliding/full layers, biased clamped-SwiGLU experts
    Row("qwen2"),  # test_sglang_engine_qwen2_tp.py's tp1 engine
]  # fmt: skip
COMMON_OPS = ("extend_attention", "decode_attention", "store_kv", "rotary_embedding", "greedy")


def engine_options(row: Row) -> dict:
    return {"tp_size": row.tp_size, "chunked_prefill_size": CHUNK, **row.options}


def _greedy(n=NEW):
    return {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}


def _prompts(hf):
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    long = hf.encode("Once upon a time there was a little model that learned to count: one two three four five six. "
                     "Attention reads keys and values from a paged cache; each page holds a few tokens.")  # fmt: skip
    assert len(long) > 2 * CHUNK
    return prefix, [prefix + hf.encode(" the same tokens."), prefix + hf.encode(" a kernel"), long]


@pytest.mark.parametrize("row", ROWS, ids=[r.arch for r in ROWS])
def test_serves_equal_to_its_oracle_and_readme_row_matches(row, tiny_model, engines):
    from conftest import HFOracle

    from kunlun_triton.sglang_plugin.report import engine_dispatch_report
    from kunlun_triton.sglang_plugin.platform.support import model_config

    path = tiny_model(row.arch)
    architecture = model_config(path)["architectures"][0]
    hf = HFOracle(path, **row.hf_config_changes)
    prefix, prompts = _prompts(hf)
    expected = [hf.greedy(p, NEW) for p in prompts]
    if row.hf_config_changes:  # the documented model difference is real: HF as published differs
        published = HFOracle(path)
        assert [published.greedy(p, NEW) for p in prompts] != expected, "no model difference left: compare with HF"

    engine = engines.get(path, **engine_options(row))
    # The Llama and Qwen2 engines are shared with other test files: the row lists
    # only the ops this test's requests ran, whatever ran on the engine before.
    calls_before = op_calls(engine_dispatch_report(engine)[0]["ops"])
    first = engine.generate(input_ids=prompts, sampling_params=_greedy())
    assert [output_ids(o) for o in first] == expected
    again = engine.generate(input_ids=prompts[:2], sampling_params=_greedy())  # radix-cache hits
    assert [output_ids(o) for o in again] == expected[:2]
    assert sum(o["meta_info"].get("cached_tokens", 0) for o in again) >= 2 * len(prefix)

    reports = engine_dispatch_report(engine)
    assert sorted(reports) == list(range(row.tp_size))
    ops = reports[0]["ops"]
    for name in COMMON_OPS + row.ops:
        assert name in ops, f"{row.arch}: {name} never ran: {sorted(ops)}"
    for name, entry in ops.items():
        if not name.startswith(("all_", "reduce_", "broadcast")):
            assert entry["impl"] == "triton" and set(entry["calls"]) == {"triton"}, (row.arch, name, entry)
    if row.tp_size > 1:
        assert set(ops["all_reduce"]["calls"]) == {"kunlun_triton.comm"}, ops["all_reduce"]
    for rank, rep in reports.items():  # every rank runs the architecture's own ops on our kernels
        for name in row.ops:
            assert set(rep["ops"].get(name, {}).get("calls", {})) == {"triton"}, (row.arch, rank, name)
    if "moe_topk" in row.ops:  # one router and one experts call per MoE layer and forward
        moe_layers = 1 if row.arch == "deepseek_v2" else 2  # DeepSeek: first layer dense
        assert ops["moe_topk"]["calls"]["triton"] == ops["fused_experts"]["calls"]["triton"] >= 2 * moe_layers

    served = f"2 layers, TP {row.tp_size}, radix cache + chunked prefill"
    kernels = kernels_since(ops, calls_before)
    result = {"architecture": architecture, "served": served, "oracle": row.oracle, "ops": kernels,
              "refused": refusals(path, moe="moe_topk" in row.ops)}  # fmt: skip
    check_or_write_row(result)


def test_readme_table_lists_exactly_the_matrix_the_quantized_rows_and_the_refusal_notes():
    """The matrix's rows, then the quantized serving tests' (`models_table.QUANTIZED`), the
    speculative tests' (`models_table.SPECULATIVE`) and the hybrid models' (`models_table.HYBRID`),
    in that order."""
    text = README.read_text()
    rows = list(models_table.table_rows(text))
    assert len(rows) == len(ROWS) + len(models_table.AFTER_MATRIX), rows
    assert rows[len(ROWS):] == list(models_table.AFTER_MATRIX), rows
    assert models_table.notes_in(text) == models_table.render_notes()


def test_an_unsupported_option_fails_at_start_up_not_mid_request(tiny_model):
    """A quantized KV cache other than fp8 (mxfp8) is refused while the server arguments are set up,
    in this process: our own exception type reaches the caller (an error in a
    scheduler process would arrive as SGLang's child-process failure)."""
    from kt_sglang_support import start_engine

    from kunlun_triton.sglang_plugin.platform.support import UnsupportedFeature

    with pytest.raises(UnsupportedFeature, match=r"DeepseekV2ForCausalLM .*--kv-cache-dtype mxfp8.*auto"):
        start_engine(tiny_model("deepseek_v2"), kv_cache_dtype="mxfp8")


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_moe_models_on_one_rank(arch, tiny_model, engines):
    """The matrix serves the MoE rows on two ranks; on one rank each expert is
    whole (width 48, not 24 per rank): HF's greedy tokens, router and experts
    on our kernels, one call of each per MoE layer and forward."""
    from conftest import HFOracle

    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    path = tiny_model(arch)
    hf = HFOracle(path)
    _, prompts = _prompts(hf)
    engine = engines.get(path, tp_size=1, chunked_prefill_size=CHUNK)
    first = engine.generate(input_ids=prompts, sampling_params=_greedy())
    assert [output_ids(o) for o in first] == [hf.greedy(p, NEW) for p in prompts]
    ops = engine_dispatch_report(engine)[0]["ops"]
    for name in ("moe_topk", "fused_experts"):
        assert set(ops[name]["calls"]) == {"triton"}, (arch, name, ops.get(name))
    assert ops["moe_topk"]["calls"]["triton"] == ops["fused_experts"]["calls"]["triton"] >= 2 * 2
