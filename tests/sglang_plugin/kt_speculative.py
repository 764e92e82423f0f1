"""A random EAGLE draft head for a tiny Llama target, built locally (imported
by name: tests/ is not a package).

SGLang's ``LlamaForCausalLMEagle`` (``srt/models/llama_eagle.py``): one
decoder layer without its input norm, ``fc`` mapping [embedding, target
hidden state] (2 x hidden) to hidden, no final norm; checkpoint names
without the ``model.`` prefix. Random weights: drafts are rarely accepted,
which is the point (the verify path rejects and repairs, losslessly).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def build_eagle_head(target_dir, out_dir, seed: int = 1) -> str:
    import torch

    target, out = Path(target_dir), Path(out_dir)
    if (out / "model.safetensors").exists():
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((target / "config.json").read_text())
    config.update(architectures=["LlamaForCausalLMEagle"], num_hidden_layers=1)
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    dim = config.get("head_dim") or hidden // heads
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return (torch.randn(*shape, generator=gen) * 0.1).contiguous()

    weights = {
        "embed_tokens.weight": rand(vocab, hidden),
        "fc.weight": rand(hidden, 2 * hidden),
        "fc.bias": rand(hidden),
        "layers.0.self_attn.q_proj.weight": rand(heads * dim, hidden),
        "layers.0.self_attn.k_proj.weight": rand(kv_heads * dim, hidden),
        "layers.0.self_attn.v_proj.weight": rand(kv_heads * dim, hidden),
        "layers.0.self_attn.o_proj.weight": rand(hidden, heads * dim),
        "layers.0.mlp.gate_proj.weight": rand(inter, hidden),
        "layers.0.mlp.up_proj.weight": rand(inter, hidden),
        "layers.0.mlp.down_proj.weight": rand(hidden, inter),
        "layers.0.post_attention_layernorm.weight": torch.ones(hidden),
        "lm_head.weight": rand(vocab, hidden),
    }
    return _save_checkpoint(out, weights, config, target, "chat_template.jinja")


def build_nextn_draft(target_dir, out_dir, seed: int = 2) -> str:
    """A random DeepSeek MTP (NextN) draft layer for a tiny DeepSeek-V2 target,
    as DeepSeek-V3 checkpoints carry it: one more decoder layer
    ``model.layers.{num_hidden_layers}`` (MLA attention, MoE MLP) with
    ``enorm``, ``hnorm``, ``eh_proj`` ([embedding, target hidden] -> hidden)
    and ``shared_head.norm``; the embedding and head are the target's (SGLang
    shares them). Architecture ``DeepseekV3ForCausalLMNextN`` (SGLang's
    ``models/deepseek_nextn.py``), ``num_nextn_predict_layers`` 1."""
    import torch
    from safetensors import safe_open

    target, out = Path(target_dir), Path(out_dir)
    if (out / "model.safetensors").exists():
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((target / "config.json").read_text())
    n = config["num_hidden_layers"]
    config.update(architectures=["DeepseekV3ForCausalLMNextN"], num_nextn_predict_layers=1)
    hidden = config["hidden_size"]
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    with safe_open(str(target / "model.safetensors"), "pt") as f:
        for name in f.keys():  # the shapes of the target's last (MoE) layer, fresh random values
            if name.startswith(f"model.layers.{n - 1}."):
                t = f.get_tensor(name)
                fresh = (torch.randn(t.shape, generator=gen) * t.std().clamp(min=1e-3)) if t.dim() > 1 else t.clone()
                weights[name.replace(f"model.layers.{n - 1}.", f"model.layers.{n}.")] = fresh.contiguous()
    prefix = f"model.layers.{n}."
    weights[prefix + "enorm.weight"] = torch.ones(hidden)
    weights[prefix + "hnorm.weight"] = torch.ones(hidden)
    weights[prefix + "eh_proj.weight"] = (torch.randn(hidden, 2 * hidden, generator=gen) * 0.1).contiguous()
    weights[prefix + "shared_head.norm.weight"] = torch.ones(hidden)
    return _save_checkpoint(out, weights, config, target, "special_tokens_map.json")



def _save_checkpoint(out, weights, config, target, extra_file: str) -> str:
    """`weights` and `config` as a checkpoint in `out`, with the target's tokenizer files."""
    from safetensors.torch import save_file

    save_file(weights, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", extra_file):
        if (target / name).exists():
            shutil.copy(target / name, out / name)
    return str(out)

# The lossless tests' requests (test_sglang_speculative.py, test_sglang_speculative_ngram.py):
# NEW greedy tokens each; prompts that share a prefix (a radix hit), span two prefill chunks of
# CHUNK tokens, and repeat themselves (so an n-gram corpus has something to propose).
NEW = 12
CHUNK = 16


def greedy_params(n=NEW):
    return {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}


def lossless_prompts(hf):
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    long = hf.encode("Once upon a time there was a little model that learned to count: one two three four five six. "
                     "Attention reads keys and values from a paged cache; each page holds a few tokens.")  # fmt: skip
    assert len(long) > 2 * CHUNK
    repeats = hf.encode("one two three four one two three four one two three four one two")
    return prefix, [prefix + hf.encode(" the same tokens."), long, repeats]


# Sampled requests of every kind in one batch (issue 39: the first one used to kill the scheduler).
SAMPLED = [{"temperature": 0.8}, {"temperature": 1.0, "top_k": 5}, {"temperature": 0.7, "top_p": 0.9},
           {"temperature": 1.2, "min_p": 0.1}, {"temperature": 0.9, "top_k": 20, "top_p": 0.8, "min_p": 0.05}]
SAMPLED_OPS = ("tree_speculative_sampling_target_only", "top_k_renorm_probs", "top_p_renorm_probs")


def sampled_between_greedy(engine, hf, greedy_out):
    """Sampled requests through the speculative verify on our kernels, then the
    first greedy request again: the same tokens as before them."""
    from kt_sglang_support import output_ids

    prompts = lossless_prompts(hf)[1]
    batch = [prompts[i % len(prompts)] for i in range(len(SAMPLED))]
    outs = engine.generate(input_ids=batch, sampling_params=[{**p, "max_new_tokens": NEW, "ignore_eos": True}
                                                             for p in SAMPLED])  # fmt: skip
    assert all(len(output_ids(o)) == NEW for o in outs), [output_ids(o) for o in outs]
    assert sum(o["meta_info"]["spec_verify_ct"] for o in outs) > 0
    again = engine.generate(input_ids=prompts[0], sampling_params=greedy_params())
    assert output_ids(again) == output_ids(greedy_out)
