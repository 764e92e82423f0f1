"""`kunlun-triton bench speculative` and the dispatch report's accept length
(docs/speculative.md): the accept counters the scheduler reports equal those
computed from SGLang's own per-request ``meta_info`` (``spec_verify_ct``,
``spec_num_correct_drafts``, ``completion_tokens``: the independent oracle),
the accept length is >= 1, and the tokens equal those without speculative
decoding and HF transformers' greedy ones.

Two engines (about a minute each on 2 cores): STANDALONE on the tiny Llama
with its first layer as the draft (`build_truncated_draft`), then the same
target without speculative decoding; one alive at a time (kt_engines).
"""

from __future__ import annotations

import pytest

NEW = 10


def _oracle(outs) -> dict:
    """Pooled over requests from SGLang's meta_info, as its tokenizer manager defines them."""
    meta = [o["meta_info"] for o in outs]
    return {"requests": len(meta), "completion_tokens": sum(m["completion_tokens"] for m in meta),
            "verify_steps": sum(m.get("spec_verify_ct", 0) for m in meta),
            "correct_drafts": sum(m.get("spec_num_correct_drafts", 0) for m in meta)}  # fmt: skip


@pytest.fixture(scope="module")
def bench_result(tiny_llama, hf_llama, model_root):
    import kt_engines
    from kt_sglang_support import ENGINE_DEFAULTS, start_sglang_engine

    from kunlun_triton.tools.speculative_bench import build_truncated_draft, measure

    draft = build_truncated_draft(tiny_llama, f"{model_root}/tiny-llama-first1", 1)
    prompts = [hf_llama.encode("Once upon a time there was a little model"),
               hf_llama.encode("one two three four one two three four one two")]  # fmt: skip
    spec = {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": draft,
            "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}

    def start(path, **kw):
        return kt_engines.start(start_sglang_engine, path, **{**ENGINE_DEFAULTS, **kw})

    result = measure(tiny_llama, prompts, NEW, spec, start=start, page_size=16)
    return result, prompts


def test_truncated_draft_is_the_targets_first_layers(tiny_llama, model_root):
    """The draft checkpoint (HF transformers loads it) holds the target's embedding,
    final norm, head and first layer, bit for bit, and nothing of layer 2."""
    import torch
    from transformers import AutoModelForCausalLM

    from kunlun_triton.tools.speculative_bench import build_truncated_draft

    draft = build_truncated_draft(tiny_llama, f"{model_root}/tiny-llama-first1", 1)
    full = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).state_dict()
    part = AutoModelForCausalLM.from_pretrained(draft, dtype=torch.float32).state_dict()
    assert part.keys() == {k for k in full if "layers.1." not in k}
    assert all(torch.equal(part[k], full[k]) for k in part)
    with pytest.raises(ValueError, match="--draft-layers must be in 1..1"):
        build_truncated_draft(tiny_llama, f"{model_root}/tiny-llama-first2", 2)


def test_report_accept_length_equals_sglangs_meta_info(bench_result):
    result, _ = bench_result
    spec = result["speculative"]
    # the absolute report: every request this engine finished (the warm-up and the timed batch)
    report = spec["report"]["accept"]
    oracle = _oracle(spec["warmup"] + spec["outputs"])
    assert {k: report[k] for k in oracle} == oracle
    assert report["accept_length"] == pytest.approx(oracle["completion_tokens"] / oracle["verify_steps"])
    # the bench's numbers: the timed batch alone (report after - before)
    acc, timed = result["accept"], _oracle(spec["outputs"])
    assert {k: acc[k] for k in timed} == timed
    assert acc["accept_length"] == pytest.approx(timed["completion_tokens"] / timed["verify_steps"])
    for o in spec["outputs"]:  # SGLang's own per-request accept length, same definition
        m = o["meta_info"]
        assert m["spec_accept_length"] == pytest.approx(m["completion_tokens"] / m["spec_verify_ct"])
    assert acc["accept_length"] >= 1.0
    assert acc["accept_rate"] == pytest.approx(timed["correct_drafts"] / (timed["verify_steps"] * 3))
    # tokens per target forward: the decode tokens (the first comes from prefill) per verify step
    assert acc["tokens_per_target_forward"] == pytest.approx(
        (timed["completion_tokens"] - timed["requests"]) / timed["verify_steps"])
    phases = result["phases"]  # a verify forward serves both requests while both run
    assert acc["verify_forwards"] == phases["target_verify"]["forwards"] > 0
    assert phases["target_verify"]["requests"] == timed["verify_steps"]
    assert acc["verify_forwards"] < timed["verify_steps"]
    assert phases["target_verify"]["ops"]["extend_attention"] > 0  # a chain: causal verify
    assert phases["draft_decode"]["ops"]["decode_attention"] > 0


def test_bench_is_lossless_and_prints_both_sides(bench_result, hf_llama):
    from kunlun_triton.tools.speculative_bench import format_result

    result, prompts = bench_result
    assert result["baseline"] is not None and "accept" not in result["baseline"]["report"]
    assert result["lossless"]
    assert [list(o["output_ids"]) for o in result["speculative"]["outputs"]] == [
        hf_llama.greedy(p, NEW) for p in prompts]  # fmt: skip
    assert result["speculative"]["tokens"] == result["baseline"]["tokens"] == len(prompts) * NEW
    text = format_result(result)
    assert f"accept length (tokens / verify step)  {result['accept']['accept_length']:12.2f}" in text
    assert "tokens / s" in text and "speed-up" in text
    assert "tokens equal without speculative decoding: yes" in text


def test_accept_ratios_and_the_serve_report_line():
    """The ratios from counts, by their definitions (SGLang's meta_info ones):
    2 requests, 20 tokens in 8 verify steps (5 forwards), 6 of 8 x 3 drafts accepted."""
    from kunlun_triton.sglang_plugin.tools.serve import format_report
    from kunlun_triton.sglang_plugin.speculative.accept import accept_ratios

    counts = {"requests": 2, "completion_tokens": 20, "verify_steps": 8, "correct_drafts": 6, "verify_forwards": 5}
    acc = accept_ratios(counts, num_draft_tokens=4)
    assert (acc["accept_length"], acc["accept_rate"], acc["tokens_per_target_forward"]) == (2.5, 0.25, 2.25)
    assert accept_ratios({k: 0 for k in counts}, 4)["accept_length"] is None  # nothing finished yet
    text = format_report({"tp_rank": 0, "pid": 1, "target": "interpreter", "ops": {}, "speculative": {},
                          "accept": acc})  # fmt: skip
    assert ("speculative accept length 2.50 tokens per verify step (20 tokens, 8 verify steps, 2 requests); "
            "2.25 tokens per target forward") in text


def test_cli_refuses_a_bad_command_line_before_any_engine(tiny_llama, capsys):
    """`kunlun-triton bench speculative`: a draft of more layers than the target has, or no
    target, is exit 2 naming the flag, and nothing starts."""
    from kunlun_triton import cli

    assert cli.main(["bench", "speculative", "--model-path", tiny_llama, "--draft-layers", "5"]) == 2
    assert "--draft-layers must be in 1..1 (the target has 2), got 5" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "speculative", "--draft-layers", "1"])
    assert exc.value.code == 2 and "--model-path" in capsys.readouterr().err


def test_the_dispatch_report_is_a_short_table():
    """The main job's and `serve`'s default: one row per op with its
    implementation and calls; why only for an op that left Triton."""
    from kunlun_triton.sglang_plugin.tools.serve import format_report

    text = format_report({"tp_rank": 1, "pid": 7, "target": "interpreter", "ops": {
        "store_kv": {"impl": "triton", "reason": "interpreter", "calls": {"triton": 60}},
        "decode_attention": {"impl": "torch", "reason": "forced by KUNLUN_TRITON_BACKEND", "calls": {"torch": 2,
                                                                                                   "triton": 28}},
    }})  # fmt: skip
    rows = [line.split() for line in text.splitlines()[1:]]
    assert rows[0] == ["op", "implementation", "calls"]
    assert rows[1][:2] == ["decode_attention", "torch"] and "(forced" in text
    assert rows[2] == ["store_kv", "triton", "triton", "60"]
    assert text.splitlines()[0].startswith("kunlun-triton: scheduler dispatch report (tp rank 1")
