"""Start-up refusals of the kunlun_triton attention backend (support.py): each
names the model's architecture, the feature as the user asked for it and
what to do; another attention backend is left to SGLang."""

import json
from types import SimpleNamespace

import pytest

from kunlun_triton.sglang_plugin.platform.support import UnsupportedFeature, check_support


def _model(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["SomeForCausalLM"], **config}))
    return SimpleNamespace(model_path=str(tmp_path), speculative_algorithm=None, kv_cache_dtype="auto")


@pytest.mark.parametrize("config,args,match", [
    ({"index_topk": 2048}, {}, r"SomeForCausalLM .*DeepSeek sparse attention.*torch_native"),
    ({}, {"speculative_algorithm": "DFLASH"}, r"--speculative-algorithm DFLASH.*EAGLE, EAGLE3, STANDALONE or NGRAM"),
    ({}, {"kv_cache_dtype": "mxfp8"}, r"--kv-cache-dtype mxfp8.*auto"),
    ({"kv_lora_rank": 512}, {"enable_deterministic_inference": True}, r"deterministic inference on an MLA model"),
])  # fmt: skip
def test_unsupported_features_are_refused_with_model_feature_and_fix(tmp_path, config, args, match):
    server_args = _model(tmp_path, **config)
    for key, value in args.items():
        setattr(server_args, key, value)
    with pytest.raises(UnsupportedFeature, match=match):
        check_support(server_args, ours=True)
    check_support(server_args, ours=False)  # another backend: SGLang's call


def test_plain_models_pass(tmp_path):
    check_support(_model(tmp_path, model_type="llama"), ours=True)
    check_support(_model(tmp_path, model_type="gpt_oss"), ours=True)  # sinks: served (test_sglang_gpt_oss.py)
    check_support(SimpleNamespace(model_path="/no/such/dir", speculative_algorithm=None, kv_cache_dtype="bfloat16"),
                  ours=True)  # fmt: skip


def test_ngram_is_refused_exactly_where_sglangs_ngram_worker_cannot_import(tmp_path):
    """The oracle is SGLang's own NGRAM worker module: where it imports (with
    the platform's tree-op routing, as install does), NGRAM starts; where it
    cannot (SGLang 0.5.21 off CUDA without sgl_kernel), the start-up refusal
    names NGRAM and what to use instead. CI runs this file on both ends of the
    window."""
    import importlib

    from kunlun_triton.sglang_plugin.speculative.ngram import import_reconstruct_tree

    import_reconstruct_tree()
    try:
        importlib.import_module("sglang.srt.speculative.ngram_worker")
        imports = True
    except ImportError:
        imports = False
    server_args = _model(tmp_path)
    server_args.speculative_algorithm = "NGRAM"
    if imports:
        check_support(server_args, ours=True)
    else:
        with pytest.raises(UnsupportedFeature, match=r"NGRAM .*sgl_kernel.*0\.5\.22 or newer.*STANDALONE or EAGLE"):
            check_support(server_args, ours=True)


def test_gpt_oss_reads_our_backend_as_sglangs_triton_in_its_allow_list_only(tmp_path):
    """SGLang's gpt-oss check asserts an attention backend with sinks and sliding
    windows (its own names); model_rules maps ours to ``triton`` for gpt-oss only,
    and pins its MoE runner to triton unless the user chose one."""
    from kunlun_triton.sglang_plugin.platform.model_rules import backends_for_allow_lists, pin_moe_runner

    def original(cfg):
        return cfg.prefill_attention_backend or cfg.attention_backend, cfg.attention_backend

    def args(arch, **fields):
        path = tmp_path / arch
        path.mkdir(exist_ok=True)
        (path / "config.json").write_text(json.dumps({"architectures": [arch]}))
        return SimpleNamespace(model_path=str(path), attention_backend="kunlun_triton", prefill_attention_backend=None,
                               moe_runner_backend="auto", **fields)  # fmt: skip

    gpt_oss, llama4 = args("GptOssForCausalLM"), args("Llama4ForCausalLM")
    assert backends_for_allow_lists(original, gpt_oss) == ("triton", "triton")
    assert backends_for_allow_lists(original, llama4) == ("kunlun_triton", "kunlun_triton")
    mixed = args("GptOssForCausalLM")
    mixed.prefill_attention_backend = "fa3"
    assert backends_for_allow_lists(original, mixed) == ("fa3", "triton")
    pin_moe_runner(gpt_oss)
    pin_moe_runner(llama4)
    assert (gpt_oss.moe_runner_backend, llama4.moe_runner_backend) == ("triton", "auto")
    chosen = args("GptOssForCausalLM")
    chosen.moe_runner_backend = "triton_kernel"
    pin_moe_runner(chosen)
    assert chosen.moe_runner_backend == "triton_kernel"  # the user's choice (check_server_args refuses it)
