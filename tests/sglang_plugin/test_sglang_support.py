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
    ({"model_type": "gpt_oss"}, {}, r"attention sinks.*torch_native"),
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
