"""`convert-weights --from-gguf` for every architecture it supports: llama,
qwen2, qwen3, qwen2moe, qwen3moe, gemma2, gemma3.

Per architecture a tiny random HF transformers model is written as a GGUF file
here, the way llama.cpp's convert_hf_to_gguf.py writes one (its tensor names,
Llama's q/k permutation, Gemma's norms with +1 folded in, MoE experts stacked
into one tensor per projection, the ``<arch>.*`` keys), converted, and loaded
back by HF transformers. Oracles, none of them the converter: the original
model's every tensor (equal, F32 file) and its logits (equal); for a Q8_0 file
gguf's own dequantization of what was stored. Needs transformers (the sglang
environment), hence the file name.
"""

from __future__ import annotations

import json
import os

import gguf
import numpy as np
import pytest
import torch
from test_gguf_checkpoint import llama_cpp_permute

from kunlun_triton.tools.checkpoint_files import ConvertError
from kunlun_triton.tools.gguf.convert import convert_gguf

Q = gguf.GGMLQuantizationType
BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-6)  # fmt: skip
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=4)
CONFIGS = {
    "llama": ("LlamaConfig", dict(BASE, rope_theta=50000.0, head_dim=16)),
    "qwen2": ("Qwen2Config", dict(BASE, rope_theta=1e6, tie_word_embeddings=False)),
    "qwen3": ("Qwen3Config", dict(BASE, head_dim=32, rope_theta=1e6, tie_word_embeddings=True)),
    "qwen2moe": ("Qwen2MoeConfig", dict(BASE, **MOE, shared_expert_intermediate_size=48, rope_theta=1e6)),
    "qwen3moe": ("Qwen3MoeConfig", dict(BASE, **MOE, head_dim=16, norm_topk_prob=True, rope_theta=1e6)),
    "gemma2": ("Gemma2Config", dict(BASE, **GEMMA, attn_logit_softcapping=50.0, final_logit_softcapping=30.0)),
    "gemma3": ("Gemma3TextConfig", dict(BASE, **GEMMA, num_hidden_layers=6)),  # layer 6 is the global one
}
# HF name (after model.layers.N.) -> llama.cpp's (after blk.N.), as convert_hf_to_gguf.py maps them
LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
         "mlp.gate": "ffn_gate_inp", "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
         "mlp.shared_expert.up_proj": "ffn_up_shexp", "mlp.shared_expert.down_proj": "ffn_down_shexp",
         "mlp.shared_expert_gate": "ffn_gate_inp_shexp", "input_layernorm": "attn_norm"}  # fmt: skip
NORMS_LLAMA = {"post_attention_layernorm": "ffn_norm"}
NORMS_GEMMA = {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"}  # fmt: skip


def tiny_model(arch):
    import transformers

    cls, kwargs = CONFIGS[arch]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # multiples of 1/256 in [-0.5, 0.5]: w + 1 and back are exact in float32
                p.copy_(torch.randint(-128, 129, p.shape).float() / 256)
            else:
                p.copy_(torch.randn(p.shape) * 0.1)
    return model


def gguf_tensors(arch, model) -> dict:
    """llama.cpp's tensors for `model`: {GGUF name: float32 array}."""
    cfg, out = model.config, {}
    gemma = arch.startswith("gemma")
    layer_names = {**LAYER, **(NORMS_GEMMA if gemma else NORMS_LLAMA)}
    for name, t in model.state_dict().items():
        w = t.float().numpy().copy()
        if gemma and name.endswith("norm.weight"):
            w = w + np.float32(1.0)
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = w
        elif name == "model.norm.weight":
            out["output_norm.weight"] = w
        elif name == "lm_head.weight":
            if not cfg.tie_word_embeddings:
                out["output.weight"] = w
        else:
            _, _, layer, rest = name.split(".", 3)
            if rest == "mlp.experts.gate_up_proj":  # [E, 2I, H], gate rows first
                half = w.shape[1] // 2
                out[f"blk.{layer}.ffn_gate_exps.weight"], out[f"blk.{layer}.ffn_up_exps.weight"] = w[:, :half], w[:, half:]
                continue
            if rest == "mlp.experts.down_proj":
                out[f"blk.{layer}.ffn_down_exps.weight"] = w
                continue
            base, kind = rest.rsplit(".", 1)
            if arch == "llama" and base == "self_attn.q_proj":
                w = llama_cpp_permute(w, cfg.num_attention_heads)
            elif arch == "llama" and base == "self_attn.k_proj":
                w = llama_cpp_permute(w, cfg.num_key_value_heads)
            if base == "mlp.shared_expert_gate":
                w = w.reshape(-1)  # llama.cpp's {n_embd}
            out[f"blk.{layer}.{layer_names[base]}.{kind}"] = w
    return out


def write_gguf(path, arch, model, qtype=Q.F32, extra_tensor=None):
    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = cfg.rope_parameters
    w.add_rope_freq_base(float((rope.get("full_attention") or rope)["rope_theta"]))
    w.add_vocab_size(cfg.vocab_size)
    if "moe" in arch:
        w.add_expert_count(cfg.num_experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
        if arch == "qwen2moe":
            w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    if arch.startswith("gemma"):
        w.add_sliding_window(cfg.sliding_window)
        if cfg.attn_logit_softcapping is not None:
            w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
            w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    tensors = gguf_tensors(arch, model)
    if extra_tensor:
        tensors[extra_tensor] = np.zeros(4, np.float32)
    for name, t in tensors.items():
        if t.ndim >= 2 and qtype != Q.F32:
            w.add_tensor(name, gguf.quants.quantize(t, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_converted_checkpoint_is_the_model(tmp_path, arch):
    """Every tensor equal to the original's and the logits equal, through HF's own loader."""
    model = tiny_model(arch)
    write_gguf(tmp_path / "m.gguf", arch, model)
    config = convert_gguf(tmp_path / "m.gguf", tmp_path / "out", dtype="fp32", progress=False, tokenizer=False)
    assert config["model_type"] == model.config.model_type
    back = load(tmp_path / "out")
    assert type(back) is type(model)
    want, got = model.state_dict(), back.state_dict()
    assert set(got) == set(want)
    for name, t in want.items():
        assert torch.equal(got[name], t), name
    ids = torch.tensor([[3, 17, 42, 99, 5, 64, 7, 120, 1, 33]])  # longer than Gemma's sliding window of 4
    with torch.no_grad():
        assert torch.equal(back(ids).logits, model(ids).logits)
    for key in ("sliding_window", "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
                "num_experts", "num_experts_per_tok", "norm_topk_prob", "tie_word_embeddings", "head_dim"):
        if hasattr(model.config, key):
            assert getattr(back.config, key) == getattr(model.config, key), key
    if arch == "gemma3":
        assert back.config.layer_types == model.config.layer_types
        assert back.config.rope_parameters == model.config.rope_parameters


@pytest.mark.parametrize("arch", ["qwen2", "qwen3moe", "gemma3"])
def test_q8_0_file_is_ggufs_own_dequantization(tmp_path, arch):
    """A Q8_0 file: each converted tensor is gguf.quants.dequantize of what was stored
    (experts split, Gemma's +1 taken off), and within Q8_0's rounding of the original."""
    model = tiny_model(arch)
    original = write_gguf(tmp_path / "m.gguf", arch, model, Q.Q8_0)
    convert_gguf(tmp_path / "m.gguf", tmp_path / "out", dtype="fp32", progress=False, tokenizer=False)
    from safetensors.torch import load_file

    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    stored = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(original[t.name].shape)
              for t in gguf.GGUFReader(tmp_path / "m.gguf").tensors}
    checked = 0
    for name, w in stored.items():
        if name.endswith("_exps.weight"):
            layer, proj = name.split(".")[1], {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}[
                name.split(".")[2].split("_")[1]]
            for e in range(w.shape[0]):
                assert np.array_equal(got[f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"].numpy(), w[e])
                checked += 1
            continue
        if arch.startswith("gemma") and name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        match = [k for k in got if got[k].numel() == w.size and np.array_equal(got[k].numpy().reshape(-1), w.reshape(-1))]
        assert match, name
        err = np.abs(w - original[name] + (1.0 if arch.startswith("gemma") and name.endswith("norm.weight") else 0.0))
        assert float(err.max()) <= 0.01 * float(np.abs(original[name]).max()) + 1e-7, name
        checked += 1
    assert checked >= len(stored)


def test_unknown_tensor_and_type_refused_naming_them(tmp_path):
    model = tiny_model("qwen2")
    write_gguf(tmp_path / "a.gguf", "qwen2", model, extra_tensor="blk.0.attn_sinks.weight")
    with pytest.raises(ConvertError, match=r"'blk\.0\.attn_sinks\.weight' has no qwen2 counterpart"):
        convert_gguf(tmp_path / "a.gguf", tmp_path / "o1", progress=False, tokenizer=False)
    w = gguf.GGUFWriter(str(tmp_path / "b.gguf"), "qwen2")
    w.add_block_count(1)
    w.add_embedding_length(64)
    w.add_feed_forward_length(96)
    w.add_head_count(4)
    blocks = np.random.default_rng(0).integers(0, 255, (64, 2 * 84), dtype=np.uint8)  # Q2_K: 84 bytes / 256
    w.add_tensor("token_embd.weight", blocks, raw_dtype=Q.Q2_K)  # byte shape: 64 x 512 values
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConvertError, match="token_embd.weight: type Q2_K is not supported"):
        convert_gguf(tmp_path / "b.gguf", tmp_path / "o2", progress=False, tokenizer=False)
    assert sorted(os.listdir(tmp_path)) == ["a.gguf", "b.gguf"]
    assert json.dumps(CONFIGS)  # the table itself stays plain data
