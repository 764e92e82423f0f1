"""Hybrid linear attention on the kunlun platform: tiny Qwen3-Next (GDN + gated
attention + MoE) and Qwen3.5 text (GDN + gated attention) served through SGLang
give HF transformers' eager float32 greedy tokens.

The tiny checkpoints (tiny_model.py, archs qwen3_next / qwen3_5): 4 layers,
three gated-delta-net layers then one full-attention layer, 2 key heads and 4
value heads of 16, conv width 4, a slow decay (A_log in [-4, -1]) so the
recurrent state carries across chunks; partial rotary 0.25 / 0.5. The first test
proves the oracle sees the GDN layers and their state. The quick form (CI) is one
engine per model with --chunked-prefill-size 16, so the 24-token prompts are cut
inside a request (the second chunk continues from the first's conv and recurrent
states, inside one of our prefill kernel's 64-token chunks): each prompt alone,
the three as one batch, and second turns whose prefix state comes from SGLang's
mamba radix cache (``no_buffer``: the platform's choice, rules.py). The slow form
adds concurrent arrivals of mixed lengths on a small pool."""

from __future__ import annotations

import pytest
from kt_models_table import check_or_write_row, kernels_since, refusals
from kt_sglang_support import output_ids

CHUNK, NEW = 16, 4
OPTIONS = {"tp_size": 1, "chunked_prefill_size": CHUNK}
MODELS = ("qwen3_next", "qwen3_5")
GDN_OPS = ("causal_conv1d", "causal_conv1d_update", "gated_delta_rule_prefill", "gated_delta_rule_decode",
           "gated_rms_norm", "gdn_split_qkvzba", "extend_attention", "decode_attention")  # fmt: skip


def _greedy(n=NEW):
    return {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}


def _oracle(path, **changes):
    from conftest import HFOracle

    return HFOracle(path, attn_implementation="eager", **changes)


def _prompts(hf):
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    return [prefix + hf.encode(" the same tokens."), prefix + hf.encode(" a kernel"),
            hf.encode("Once upon a time there was a little model that learned to count: one two three.")]  # fmt: skip


@pytest.fixture(scope="module", params=MODELS)
def hybrid(request, tiny_model):
    path = tiny_model(request.param)
    hf = _oracle(path)
    prompts = _prompts(hf)
    assert all(len(p) > CHUNK for p in prompts)  # chunked prefill cuts each prompt
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
    for prompt, want in zip(prompts, expected):
        assert output_ids(engine.generate(input_ids=prompt, sampling_params=_greedy())) == want, arch
    batch = engine.generate(input_ids=prompts, sampling_params=_greedy())
    assert [output_ids(out) for out in batch] == expected, arch
    # Second turns: the first turn (prompt + answer) left its states in the radix cache.
    for prompt, first in zip(prompts[:2], expected):
        turn = prompt + first + hf.encode(" and then the next one")
        out = engine.generate(input_ids=turn, sampling_params=_greedy())
        assert out["meta_info"]["cached_tokens"] >= len(prompt), (arch, out["meta_info"]["cached_tokens"])
        assert output_ids(out) == hf.greedy(turn, NEW), arch
    ops = engine_dispatch_report(engine)[0]["ops"]
    _check_row(arch, path, ops)
    for name in GDN_OPS + (("moe_topk", "fused_experts") if arch == "qwen3_next" else ()):
        assert set(ops[name]["calls"]) == {"triton"}, (arch, name, ops.get(name))
    assert all(set(entry["calls"]) == {"triton"} for entry in ops.values()), (arch, ops)
    # the models' split of their input projections (SGLang's fused_qkvzba Triton kernels before,
    # projection.py) runs once a GDN layer's forward, extend and decode alike
    gdn_forwards = sum(ops[name]["calls"]["triton"] for name in ("gated_delta_rule_prefill", "gated_delta_rule_decode"))
    assert ops["gdn_split_qkvzba"]["calls"]["triton"] == gdn_forwards, (arch, ops["gdn_split_qkvzba"], gdn_forwards)


def _check_row(arch, path, ops):
    """docs/models.md's row: every op this engine ran (it is this module's own: `OPTIONS`)."""
    from types import SimpleNamespace

    from kunlun_triton.sglang_plugin.platform.support import UnsupportedFeature, check_support

    refused = refusals(path, moe=arch == "qwen3_next")
    base = {"model_path": path, "speculative_algorithm": None, "kv_cache_dtype": "auto"}
    tries = (("speculative decoding with gated delta net", {"speculative_algorithm": "EAGLE"}),
             ("extra_buffer prefix cache with gated delta net", {"mamba_radix_cache_strategy": "extra_buffer"}),
             ("mixed chunks with gated delta net", {"enable_mixed_chunk": True}))  # fmt: skip
    for key, change in tries:
        with pytest.raises(UnsupportedFeature):
            check_support(SimpleNamespace(**{**base, **change}), ours=True)
        refused.append(key)
    check_or_write_row({
        "architecture": {"qwen3_next": "Qwen3NextForCausalLM", "qwen3_5": "Qwen3_5ForCausalLM"}[arch],
        "served": f"4 layers (3 gated delta net, 1 gated full attention), TP 1, radix cache (no_buffer) + chunked "
                  f"prefill at {CHUNK}",
        "oracle": "HF transformers, eager attention", "ops": kernels_since(ops, {}), "refused": refused})  # fmt: skip


@pytest.mark.slow
def test_concurrent_arrivals_on_a_small_pool_keep_the_states(hybrid, engines):
    """Concurrent requests of mixed lengths arriving while earlier ones decode, on
    a KV pool small enough that SGLang may retract and re-run requests: each still
    gets HF's tokens. (--enable-mixed-chunk is refused for these models: rules.py.)"""
    import asyncio

    arch, path, hf, prompts = hybrid
    more = [hf.encode(text) for text in ("Hello, how are you today?", "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12",
                                         "Tell me a story about a cat and a dog who lived in a small house.")]
    every = prompts + more
    engine = engines.get(path, **OPTIONS, max_total_tokens=160, max_running_requests=6)
    new = 12

    async def run():
        async def one(i, prompt):
            await asyncio.sleep(0.3 * i)  # arrivals while earlier requests decode
            return await engine.async_generate(input_ids=prompt, sampling_params=_greedy(new))

        return await asyncio.gather(*(one(i, p) for i, p in enumerate(every)))

    outs = asyncio.run(run())
    assert [output_ids(out) for out in outs] == [hf.greedy(p, new) for p in every], arch


GDN_CONFIG = {"architectures": ["Qwen3NextForCausalLM"], "linear_num_value_heads": 32, "linear_conv_kernel_dim": 4}


@pytest.mark.parametrize("args,match", [
    ({"speculative_algorithm": "EAGLE"}, r"Qwen3NextForCausalLM .*--speculative-algorithm EAGLE.*drop --speculative"),
    ({"mamba_radix_cache_strategy": "extra_buffer"},
     r"--mamba-radix-cache-strategy extra_buffer.*no_buffer with --disable-overlap-schedule"),
    ({"enable_mixed_chunk": True}, r"--enable-mixed-chunk.*drop --enable-mixed-chunk"),
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


def test_the_platform_picks_no_buffer_for_gdn_models_only(tmp_path):
    """SGLang resolves ``auto`` to ``no_buffer`` once the overlap scheduler is off
    (arg_groups/overrides.py); a strategy the user chose, or another model, is left."""
    from types import SimpleNamespace

    from kunlun_triton.sglang_plugin.linear_attention.rules import apply_hybrid_defaults

    for config, strategy, off in ((GDN_CONFIG, "auto", True), (GDN_CONFIG, "no_buffer", False),
                                  ({"architectures": ["LlamaForCausalLM"]}, "auto", False)):  # fmt: skip
        args = SimpleNamespace(mamba_radix_cache_strategy=strategy, disable_overlap_schedule=False)
        apply_hybrid_defaults(args, config)
        assert args.disable_overlap_schedule is off and args.mamba_radix_cache_strategy == strategy
