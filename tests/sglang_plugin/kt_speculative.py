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
    from safetensors.torch import save_file

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
    save_file(weights, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"):
        if (target / name).exists():
            shutil.copy(target / name, out / name)
    return str(out)
