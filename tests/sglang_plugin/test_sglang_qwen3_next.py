"""Hybrid linear attention on the kunlun platform: tiny Qwen3-Next (GDN + gated
attention + MoE) and Qwen3.5 text (GDN + gated attention) served through SGLang
give HF transformers' eager float32 greedy tokens.

The tiny checkpoints (tiny_model.py, archs qwen3_next / qwen3_5): 4 layers,
three gated-delta-net layers then one full-attention layer, 2 key heads and 4
value heads of 16, conv width 4, a slow decay (A_log in [-4, -1]) so the
recurrent state carries across chunks; partial rotary 0.25 / 0.5. The first test
proves the oracle sees the GDN layers and their state. The quick form (CI) is one
engine per model on SGLang's default prefix cache for these models
(``extra_buffer``: the states snapshotted into spare slots at track points
64 tokens apart) with --chunked-prefill-size 80, so the 150-token prompt is
cut inside one of our prefill kernel's 64-token chunks (the second chunk
continues from the first's conv and recurrent states): each prompt alone, the
three as one batch, and second turns whose prefix state comes from the cache:
a prefill's snapshot at token 64 (inside an 80-token extend) and 144, and a
decode's at 64 (the 58-token prompt decoding past it). The slow form serves
concurrent arrivals of mixed lengths with SGLang's retraction test mode on,
under both strategies (``no_buffer`` too). With --enable-mixed-chunk, prefill chunks share batches
with decode rows (quick for Qwen3.5, slow for Qwen3-Next)."""

from __future__ import annotations

import pytest
from kt_models_table import check_or_write_row, kernels_since, refusals
from kt_sglang_support import output_ids

CHUNK, NEW, TRACK = 80, 8, 64
# measured on Qwen3-Next's second turns (2026-12-06): 1.1e-4 at most; with SGLang's default bf16
# conv states 0.03 to 0.12 (and two of the three turns' tokens differ)
LOGPROB_ATOL = 1e-3
OPTIONS = {"tp_size": 1, "chunked_prefill_size": CHUNK, "mamba_track_interval": TRACK}
NO_BUFFER = {"tp_size": 1, "chunked_prefill_size": 16, "mamba_radix_cache_strategy": "no_buffer",
             "disable_overlap_schedule": True}  # fmt: skip
MODELS = ("qwen3_next", "qwen3_5")
GDN_OPS = ("causal_conv1d", "causal_conv1d_update", "gated_delta_rule_prefill", "gated_delta_rule_decode",
           "gated_rms_norm", "gdn_split_qkvzba", "extend_attention", "decode_attention")  # fmt: skip


def _greedy(n=NEW):
    return {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}


def _hf_logprobs(hf, ids, start):
    """HF's log-probability of each token of `ids` from position `start` on, given those before."""
    torch = hf.torch
    with torch.no_grad():
        logprobs = torch.log_softmax(hf.model(torch.tensor([list(ids)])).logits[0].double(), -1)
    return [float(logprobs[i - 1, ids[i]]) for i in range(start, len(ids))]


def _oracle(path, **changes):
    from conftest import HFOracle

    return HFOracle(path, attn_implementation="eager", **changes)


def _prompts(hf):
    """150, 58 and 100 tokens: two extends with a snapshot each, a decode past the track point, one
    extend with a snapshot inside it (the first two share their first 50 tokens)."""
    text = " ".join(f"{word} {i}" for i, word in enumerate(("radix cache prefix state chunk kernel decode " * 20).split()))
    ids = hf.encode(text)
    return [ids[:150], ids[:50] + hf.encode(" and then it began to count: one two three four")[:8], ids[200:300]]


@pytest.fixture(scope="module", autouse=True)
def float32_conv_states():
    """SGLang keeps conv states in bfloat16 unless SGLANG_MAMBA_CONV_DTYPE says otherwise (its
    ``configs/mamba_utils.py``, on every device): against a float32 oracle that rounding flips the
    tiny models' near-ties wherever a state is carried (a chunk boundary, a cached prefix; measured:
    docs/linear-attention.md). The engines here keep them in float32, as the model."""
    import os

    before = os.environ.get("SGLANG_MAMBA_CONV_DTYPE")
    os.environ["SGLANG_MAMBA_CONV_DTYPE"] = "float32"  # read by the scheduler processes the engines spawn
    yield
    if before is None:
        os.environ.pop("SGLANG_MAMBA_CONV_DTYPE")
    else:
        os.environ["SGLANG_MAMBA_CONV_DTYPE"] = before


@pytest.fixture(scope="module", params=MODELS)
def hybrid(request, tiny_model):
    path = tiny_model(request.param)
    hf = _oracle(path)
    prompts = _prompts(hf)
    assert [len(p) for p in prompts] == [150, 58, 100]
    return request.param, path, hf, prompts


def test_gdn_layers_and_their_state_change_hf_tokens(hybrid):
    """Without the GDN layers' output, or with a state that forgets within a
    token or two, HF's greedy tokens differ: the equalities below test them."""
    import torch

    arch, path, hf, prompts = hybrid
    expected = [hf.greedy(p, NEW) for p in prompts]
    for name, change in (("no GDN output", lambda attn: attn.out_proj.weight.zero_()),
                         ("a forgetful state", lambda attn: attn.A_log.fill_(3.0))):  # fmt: skip
        oracle = _oracle(path)
        with torch.no_grad():
            for layer in oracle.model.model.layers:
                if hasattr(layer, "linear_attn"):
                    change(layer.linear_attn)
        assert [oracle.greedy(p, NEW) for p in prompts] != expected, f"{arch}: {name} leaves HF's tokens unchanged"


def test_alone_batched_chunked_and_second_turns_equal_hf(hybrid, engines):
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    arch, path, hf, prompts = hybrid
    expected = [hf.greedy(p, NEW) for p in prompts]
    engine = engines.get(path, **OPTIONS)
    assert engine.get_server_info()["mamba_radix_cache_strategy"] == "extra_buffer"  # SGLang's default, served
    for prompt, want in zip(prompts, expected):
        assert output_ids(engine.generate(input_ids=prompt, sampling_params=_greedy())) == want, arch
    batch = engine.generate(input_ids=prompts, sampling_params=_greedy())
    assert [output_ids(out) for out in batch] == expected, arch
    # Second turns: the states at the first turns' track points are in the radix cache. The
    # prompt logprobs past the snapshot (SGLang matches the prefix up to logprob_start_len) are
    # computed from it: a state off by rounding moves them before it flips a token.
    for prompt, first, snapshot in zip(prompts, expected, (2 * TRACK + 16, TRACK, TRACK)):
        turn = prompt + first + hf.encode(" and then the next one")
        out = engine.generate(input_ids=turn, sampling_params=_greedy(), return_logprob=True,
                              logprob_start_len=snapshot)  # fmt: skip
        assert out["meta_info"]["cached_tokens"] >= snapshot, (arch, out["meta_info"]["cached_tokens"])
        assert output_ids(out) == hf.greedy(turn, NEW), arch
        served = [entry[0] for entry in out["meta_info"]["input_token_logprobs"]][1:]  # the first: None
        want = _hf_logprobs(hf, turn, snapshot + 1)
        error = max(abs(a - b) for a, b in zip(served, want))
        assert len(served) == len(want) and error < LOGPROB_ATOL, (arch, snapshot, error)
    ops = engine_dispatch_report(engine)[0]["ops"]
    _check_row(arch, path, ops)
    for name in GDN_OPS + (("moe_topk", "fused_experts") if arch == "qwen3_next" else ()):
        assert set(ops[name]["calls"]) == {"triton"}, (arch, name, ops.get(name))
    assert all(set(entry["calls"]) == {"triton"} for entry in ops.values()), (arch, ops)
    # the models' split of their input projections (SGLang's fused_qkvzba Triton kernels before,
    # projection.py) runs once a GDN layer's forward, extend and decode alike
    gdn_forwards = sum(ops[name]["calls"]["triton"] for name in ("gated_delta_rule_prefill", "gated_delta_rule_decode"))
    assert ops["gdn_split_qkvzba"]["calls"]["triton"] == gdn_forwards, (arch, ops["gdn_split_qkvzba"], gdn_forwards)


MIXED = {"tp_size": 1, "chunked_prefill_size": 32, "enable_mixed_chunk": True, "mamba_track_interval": TRACK}


@pytest.mark.parametrize("arch", [pytest.param("qwen3_5"), pytest.param("qwen3_next", marks=pytest.mark.slow)])
def test_prefill_chunks_mixed_into_decode_batches_equal_hf(arch, tiny_model, engines):
    """--enable-mixed-chunk: the 58-token prompt decodes 40 tokens while the 150- and 100-token
    prompts arrive (4 s apart), so their prefill chunks share extend batches with its decode rows
    (SGLang runs a mixed batch as EXTEND, a decode row as a 1-token extend past its prefix): every
    request still gets HF's tokens, and the dispatch report counts such batches."""
    import asyncio

    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    path = tiny_model(arch)
    hf = _oracle(path)
    prompts = _prompts(hf)
    runs = ((0.0, prompts[1], 40), (4.0, prompts[0], NEW), (8.0, prompts[2], NEW))
    engine = engines.get(path, **MIXED)

    async def run():
        async def one(delay, prompt, new):
            await asyncio.sleep(delay)
            return await engine.async_generate(input_ids=prompt, sampling_params=_greedy(new))

        return await asyncio.gather(*(one(*r) for r in runs))

    outs = asyncio.run(run())
    assert [output_ids(out) for out in outs] == [hf.greedy(p, new) for _, p, new in runs], arch
    batches = engine_dispatch_report(engine)[0]["gdn_extend_batches"]
    assert batches["with_decode_rows"] > 0, (arch, batches)  # a mixed batch formed


def _check_row(arch, path, ops):
    """docs/models.md's row: every op this engine ran (it is this module's own: `OPTIONS`)."""
    from types import SimpleNamespace

    from kunlun_triton.sglang_plugin.platform.support import UnsupportedFeature, check_support

    refused = refusals(path, moe=arch == "qwen3_next")
    base = {"model_path": path, "speculative_algorithm": None, "kv_cache_dtype": "auto"}
    tries = (("speculative decoding with gated delta net", {"speculative_algorithm": "EAGLE"}),)
    for key, change in tries:
        with pytest.raises(UnsupportedFeature):
            check_support(SimpleNamespace(**{**base, **change}), ours=True)
        refused.append(key)
    check_or_write_row({
        "architecture": {"qwen3_next": "Qwen3NextForCausalLM", "qwen3_5": "Qwen3_5ForCausalLM"}[arch],
        "served": f"4 layers (3 gated delta net, 1 gated full attention), TP 1, radix cache (extra_buffer, "
                  f"track interval {TRACK}) + chunked prefill at {CHUNK}, float32 conv states",  # fmt: skip
        "oracle": "HF transformers, eager attention", "ops": kernels_since(ops, {}), "refused": refused})  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["no_buffer", "extra_buffer"])
def test_concurrent_arrivals_and_retractions_keep_the_states(hybrid, engines, strategy, monkeypatch, capfd):
    """Concurrent requests of mixed lengths arriving while earlier ones decode, with SGLang's own
    retraction test mode on (SGLANG_TEST_RETRACT: every third forward retracts a decoding request,
    which later runs again from what the prefix cache kept), under either prefix-cache strategy
    (no_buffer: chunks of 16; extra_buffer: the quick form's options): each still gets HF's tokens."""
    import asyncio

    arch, path, hf, prompts = hybrid
    more = [hf.encode(text) for text in ("Hello, how are you today?", "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12",
                                         "Tell me a story about a cat and a dog who lived in a small house.")]
    every = prompts + more
    monkeypatch.setenv("SGLANG_TEST_RETRACT", "1")  # read by the scheduler this engine spawns
    options = NO_BUFFER if strategy == "no_buffer" else OPTIONS
    # log level info: the scheduler says each retraction (its stderr is this test's, captured)
    engine = engines.get(path, **options, max_total_tokens=480, max_running_requests=6, log_level="info")
    new = 12

    async def run():
        async def one(i, prompt):
            await asyncio.sleep(0.3 * i)  # arrivals while earlier requests decode
            return await engine.async_generate(input_ids=prompt, sampling_params=_greedy(new))

        return await asyncio.gather(*(one(i, p) for i, p in enumerate(every)))

    outs = asyncio.run(run())
    retractions = capfd.readouterr().err.count("Testing retraction")
    assert [output_ids(out) for out in outs] == [hf.greedy(p, new) for p in every], (arch, strategy, retractions)
    assert retractions > 0, (arch, strategy)


GDN_CONFIG = {"architectures": ["Qwen3NextForCausalLM"], "linear_num_value_heads": 32, "linear_conv_kernel_dim": 4}


@pytest.mark.parametrize("args,match", [
    ({"speculative_algorithm": "EAGLE"}, r"Qwen3NextForCausalLM .*--speculative-algorithm EAGLE.*drop --speculative"),
])  # fmt: skip
def test_what_the_hybrid_path_cannot_serve_is_refused_at_start_naming_the_flag(tmp_path, args, match):
    import json
    from types import SimpleNamespace

    from kunlun_triton.sglang_plugin.platform.support import UnsupportedFeature, check_support

    (tmp_path / "config.json").write_text(json.dumps(GDN_CONFIG))
    defaults = {"speculative_algorithm": None, "kv_cache_dtype": "auto", "mamba_radix_cache_strategy": "auto"}
    server_args = SimpleNamespace(model_path=str(tmp_path), **{**defaults, **args})
    with pytest.raises(UnsupportedFeature, match=match):
        check_support(server_args, ours=True)


def test_the_platform_keeps_qwen3_5_decode_on_our_split_and_conv(monkeypatch):
    """SGLang fuses Qwen3.5's decode projection split and conv into one kernel of its own where its
    ``_is_cuda`` holds (a card whose torch reports CUDA; never in development mode): the platform
    turns that off for GDN models unless the user chose, and leaves other models alone."""
    import os

    from kunlun_triton.sglang_plugin.linear_attention.rules import FUSED_DECODE_PROJ_CONV_ENV, apply_hybrid_defaults

    for config, before, after in ((GDN_CONFIG, None, "0"), (GDN_CONFIG, "1", "1"),
                                  ({"architectures": ["LlamaForCausalLM"]}, None, None)):  # fmt: skip
        monkeypatch.delenv(FUSED_DECODE_PROJ_CONV_ENV, raising=False)
        if before is not None:
            monkeypatch.setenv(FUSED_DECODE_PROJ_CONV_ENV, before)
        apply_hybrid_defaults(config)
        assert os.environ.get(FUSED_DECODE_PROJ_CONV_ENV) == after, (config, before)
