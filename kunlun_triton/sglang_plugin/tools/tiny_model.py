"""Tiny random checkpoints (Llama, Qwen2/3, Qwen3-MoE, Mixtral, Mistral, Phi-3, Gemma-2, DeepSeek-V2, gpt-oss,
Qwen3-Next, Qwen3.5 text) built locally.

No hub access: the config is written by hand, the weights are random (seeded),
and the tokenizer is a byte-level BPE trained with `tokenizers` on a small
built-in corpus. Needs `transformers` and `tokenizers` (the `sglang` extra
brings both); never imports SGLang.

    python -m kunlun_triton.sglang_plugin.tools.tiny_model /tmp/tiny-llama --arch llama
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ...runtime.env import env_str

ARCHS = ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "mistral", "phi3", "gemma2", "deepseek_v2", "gpt_oss",
         "qwen3_next", "qwen3_5")
# Sliding windows shorter than the test prompts, so the window changes the answer.
WINDOW = 8
# The MoE models: 8 experts, 2 per token, expert width 48 (24 per rank at TP 2: not a power of two).
MOE_EXPERTS, MOE_TOP_K, MOE_INTERMEDIATE = 8, 2, 48
# Hybrid linear attention (gated delta net): 2 key heads, 4 value heads (2 per key head), head dims 16,
# conv width 4; three GDN layers then one gated full-attention layer, as the real models interleave them.
GDN = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
           linear_conv_kernel_dim=4,
           layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"])  # fmt: skip

# A ChatML-style template: enough for /v1/chat/completions and multi-turn chats.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A kernel is a small program that runs on a device.
Triton compiles kernels for GPUs and for Kunlun XPUs. SGLang serves large language models.
The radix cache shares the prefix of prompts that begin with the same tokens.
Once upon a time there was a little model that learned to count: one two three four five six.
Attention reads keys and values from a paged cache; each page holds a few tokens.
Hello, how are you today? I am fine, thank you. What is the capital of France? Paris.
Tell me a story about a cat and a dog who lived in a small house near the river.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25.
The weather is sunny, the sky is blue, the grass is green and the sea is deep.
user assistant system: you are a helpful assistant. Please answer briefly.
"""


def _corpus_lines(repeat: int = 20) -> list[str]:
    lines = [line for line in _CORPUS.splitlines() if line.strip()]
    return lines * repeat


def train_tokenizer(out_dir: Path, vocab_size: int = 512):
    """Train a byte-level BPE on the built-in corpus; save it HF-style."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus_lines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="<|im_end|>",
        pad_token="</s>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


def _config(arch: str, vocab_size: int, tokenizer):
    import transformers

    common = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # GQA: two query heads per KV head
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        initializer_range=0.3,  # peaked logits: greedy ties are unlikely
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    if arch == "llama":
        return transformers.LlamaConfig(tie_word_embeddings=False, attention_bias=False, **common)
    if arch == "qwen3":  # q/k norms, head_dim apart from hidden / heads
        return transformers.Qwen3Config(tie_word_embeddings=False, head_dim=16, **common)
    if arch == "qwen3_moe":  # softmax routing, renormalised top-k (norm_topk_prob), q/k norms
        return transformers.Qwen3MoeConfig(tie_word_embeddings=False, num_experts=MOE_EXPERTS,
                                           num_experts_per_tok=MOE_TOP_K, moe_intermediate_size=MOE_INTERMEDIATE,
                                           norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                                           head_dim=16, **common)  # fmt: skip
    if arch == "mixtral":
        return transformers.MixtralConfig(tie_word_embeddings=False, num_local_experts=MOE_EXPERTS,
                                          num_experts_per_tok=MOE_TOP_K,
                                          **{**common, "intermediate_size": MOE_INTERMEDIATE})  # fmt: skip
    if arch == "mistral":  # every layer on a sliding window
        return transformers.MistralConfig(tie_word_embeddings=False, sliding_window=WINDOW, head_dim=16, **common)
    if arch == "phi3":  # fused qkv and gate_up projections
        return transformers.Phi3Config(tie_word_embeddings=False, sliding_window=None,
                                       **{**common, "num_key_value_heads": 4})  # fmt: skip
    if arch == "gemma2":  # (1 + w) norms, tanh GELU, attention and final-logit soft-capping, local/global layers
        return transformers.Gemma2Config(head_dim=16, query_pre_attn_scalar=16, sliding_window=WINDOW,
                                         layer_types=["sliding_attention", "full_attention"],
                                         attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                                         hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh",
                                         **common)  # fmt: skip  (HF reads hidden_activation, SGLang hidden_act)
    if arch == "deepseek_v2":
        # MLA (latent 64 + rope 16), first layer dense, then MoE with a shared expert and
        # group-limited routing (2 groups of 4, top 1 group), yarn rope scaling.
        yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 256,
                "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}
        return transformers.DeepseekV2Config(
            **{**common, "num_key_value_heads": 4}, q_lora_rank=None, kv_lora_rank=64, qk_rope_head_dim=16,
            qk_nope_head_dim=16, v_head_dim=16, head_dim=16, first_k_dense_replace=1, n_routed_experts=MOE_EXPERTS,
            num_experts_per_tok=MOE_TOP_K, n_shared_experts=1, moe_intermediate_size=MOE_INTERMEDIATE,
            topk_method="group_limited_greedy", n_group=2, topk_group=1, routed_scaling_factor=1.0,
            norm_topk_prob=False, tie_word_embeddings=False, rope_parameters=yarn,
            moe_layer_freq=1, scoring_func="softmax",  # DeepSeek's own config fields, read by SGLang
        )  # fmt: skip
    if arch == "gpt_oss":
        # Learned attention sinks, sliding/full layers, yarn rope (HF's default), 4 experts (top 2)
        # with biases, interleaved gate/up and the clamped SwiGLU (alpha 1.702; limit 2, not gpt-oss's 7:
        # this model's gate and up values stay under 7, and the clamp must change the answer).
        yarn = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "original_max_position_embeddings": 256,
                "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
        return transformers.GptOssConfig(head_dim=16, sliding_window=WINDOW, tie_word_embeddings=False,
                                         layer_types=["sliding_attention", "full_attention"], num_local_experts=4,
                                         num_experts_per_tok=2, swiglu_limit=2.0, rope_parameters=yarn,
                                         **{**common, "intermediate_size": 64})  # fmt: skip  (MXFP4: multiples of 32)
    if arch in ("qwen3_next", "qwen3_5"):
        # Partial rotary: a quarter of the head (Qwen3-Next's), half of it for Qwen3.5.
        rope = {"rope_type": "default", "rope_theta": 10000.0,
                "partial_rotary_factor": 0.25 if arch == "qwen3_next" else 0.5}
        hybrid = {**common, "num_hidden_layers": 4, "head_dim": 16, "rope_parameters": rope, **GDN}
        if arch == "qwen3_next":  # MoE in every layer, with a gated shared expert
            return transformers.Qwen3NextConfig(tie_word_embeddings=False, num_experts=MOE_EXPERTS,
                                                num_experts_per_tok=MOE_TOP_K, moe_intermediate_size=MOE_INTERMEDIATE,
                                                shared_expert_intermediate_size=MOE_INTERMEDIATE, norm_topk_prob=True,
                                                decoder_sparse_step=1, mlp_only_layers=[], **hybrid)  # fmt: skip
        return transformers.Qwen3_5TextConfig(tie_word_embeddings=False, **hybrid)
    return transformers.Qwen2Config(tie_word_embeddings=True, use_sliding_window=False, **common)


def build_tiny_model(out_dir, arch: str = "llama", seed: int = 0, overwrite: bool = False) -> Path:
    """Write a tiny random `arch` checkpoint with its tokenizer to `out_dir`.

    Returns the directory. An existing complete checkpoint is kept unless
    `overwrite`. Deterministic for a given seed.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    out = Path(out_dir)
    marker = out / "kunlun_tiny_model.json"
    if marker.exists() and not overwrite:
        return out
    import torch
    from transformers import AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(out)
    config = _config(arch, len(tokenizer), tokenizer)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.uniform_(0.8, 1.2)  # non-trivial norm weights, still stable
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif name.endswith("A_log"):
                # Slow decay (exp(g) about 0.9 a token): the recurrent state carries far past
                # a chunk, so a state lost or misread at a boundary changes the answer.
                p.uniform_(-4.0, -1.0)
            elif name.endswith("sinks"):
                # Far from zero, both signs: a sink that matters. bf16 values: SGLang's gpt-oss
                # keeps its sinks in bf16 whatever the model's dtype (as the checkpoints store them).
                p.copy_(torch.empty_like(p).uniform_(-4.0, 4.0).to(torch.bfloat16))
    model.generation_config.do_sample = False
    model.save_pretrained(str(out), safe_serialization=True)
    if arch in ("qwen3_next", "qwen3_5"):
        # SGLang reads these two at the top level, as the released checkpoints carry them: the
        # layer kinds (HF derives layer_types from it and drops it) and the rotary fraction (HF
        # reads rope_parameters'; SGLang's config class would default to 0.25 without it).
        cfg_path = out / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["full_attention_interval"] = GDN["layer_types"].index("full_attention") + 1
        cfg["partial_rotary_factor"] = cfg["rope_parameters"]["partial_rotary_factor"]
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    marker.write_text(json.dumps({"arch": arch, "seed": seed, "vocab_size": len(tokenizer)}))
    return out


def default_model_dir(arch: str = "llama") -> Path:
    root = env_str("KUNLUN_TRITON_TINY_MODEL_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "kunlun_triton", "tiny_models"
    )
    return Path(root) / f"tiny-{arch}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", help="where to write (default: ~/.cache/kunlun_triton/tiny_models/tiny-ARCH)")
    parser.add_argument("--arch", choices=ARCHS, default="llama")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    out = build_tiny_model(args.out_dir or default_model_dir(args.arch), args.arch, args.seed, args.overwrite)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
