"""HF config.json of a GGUF file, per architecture, from its ``<arch>.*`` keys.

What the GGUF does not store, llama.cpp fixes per architecture (llama-model.cpp)
and so does this: Gemma 3's sliding-window pattern (every 6th layer global) and
local rope base (10000), unless the file has ``attention.sliding_window_pattern``
/ ``rope.freq_base_swa``; Gemma's query scaling (1/sqrt(head_dim), but
1/sqrt(hidden/heads) for the 27B models: 46 layers for Gemma 2, 62 for Gemma 3);
Qwen 3 MoE normalises its top-k routing weights, Qwen 2 MoE does not.
"""

from __future__ import annotations

from ..checkpoint_files import ConvertError
from .archs import ARCHITECTURES
from .reader import field

HF_CLASSES = {
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "qwen2moe": ("Qwen2MoeForCausalLM", "qwen2_moe"),
    "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
    "gemma2": ("Gemma2ForCausalLM", "gemma2"),
    "gemma3": ("Gemma3ForCausalLM", "gemma3_text"),
}
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}


class Keys:
    """The GGUF's ``<arch>.*`` keys: `need` one, or `get` it with a default."""

    def __init__(self, reader, arch: str):
        self.reader, self.arch = reader, arch

    def get(self, key, default=None):
        return field(self.reader, f"{self.arch}.{key}", default)

    def need(self, key):
        value = self.get(key)
        if value is None:
            raise ConvertError(f"GGUF metadata has no {self.arch}.{key}; nothing written")
        return value


def architecture(reader) -> str:
    arch = field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ConvertError(f"GGUF architecture {arch!r} is not supported (supported: {', '.join(ARCHITECTURES)}); "
                           "nothing written")
    return arch


def gguf_config(reader) -> dict:
    """The HF config.json (without the dtype keys, which the writer adds)."""
    arch = architecture(reader)
    keys = Keys(reader, arch)
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise ConvertError("GGUF has rope_freqs.weight (Llama 3.1-style rope scaling), which is not supported; "
                           "nothing written")
    hidden, heads = int(keys.need("embedding_length")), int(keys.need("attention.head_count"))
    tokens = field(reader, "tokenizer.ggml.tokens")
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    vocab = keys.get("vocab_size") or (len(tokens) if tokens else None)
    if vocab is None and embed is not None:
        vocab = int(embed.shape[-1])
    hf_class, model_type = HF_CLASSES[arch]
    config = {
        "architectures": [hf_class],
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": int(keys.need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(keys.get("attention.head_count_kv", heads)),
        "head_dim": int(keys.get("attention.key_length", hidden // heads)),
        "max_position_embeddings": int(keys.get("context_length", 4096)),
        "rms_norm_eps": float(keys.get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(keys.get("rope.freq_base", 10000.0)),
        "vocab_size": int(vocab),
        "tie_word_embeddings": "output.weight" not in names,
    }
    config.update(_BUILDERS[arch](keys, config))
    scaling = keys.get("rope.scaling.type")
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise ConvertError(f"GGUF rope scaling {scaling!r} is not supported (only linear); nothing written")
        config["rope_scaling"] = {"rope_type": "linear", "factor": float(keys.need("rope.scaling.factor"))}
    for key in ("bos", "eos", "padding"):
        value = field(reader, f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            config["pad_token_id" if key == "padding" else f"{key}_token_id"] = int(value)
    return config


def _llama(keys, config):
    return {"intermediate_size": int(keys.need("feed_forward_length")), "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False}  # fmt: skip


def _qwen(keys, config):
    # Qwen 2.5 ships use_sliding_window false (every layer full attention), as llama.cpp runs it
    return {"intermediate_size": int(keys.need("feed_forward_length")), "hidden_act": "silu",
            "use_sliding_window": False, "max_window_layers": config["num_hidden_layers"]}  # fmt: skip


def _moe(keys, config):
    experts = {"num_experts": int(keys.need("expert_count")), "num_experts_per_tok": int(keys.need("expert_used_count")),
               "moe_intermediate_size": int(keys.need("expert_feed_forward_length")),
               "decoder_sparse_step": 1, "mlp_only_layers": []}  # fmt: skip
    base = {**_qwen(keys, config), "intermediate_size": int(keys.get("feed_forward_length",
                                                                     experts["moe_intermediate_size"]))}
    if keys.arch == "qwen2moe":
        shared = int(keys.need("expert_shared_feed_forward_length"))
        return {**base, **experts, "shared_expert_intermediate_size": shared, "norm_topk_prob": False,
                "qkv_bias": True}  # fmt: skip
    return {**base, **experts, "norm_topk_prob": True}


def _gemma(keys, config):
    layers, hidden, heads = config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"]
    scalar = hidden // heads if layers == GEMMA_27B_LAYERS[keys.arch] else config["head_dim"]
    out = {"intermediate_size": int(keys.need("feed_forward_length")), "hidden_activation": "gelu_pytorch_tanh",
           "hidden_act": "gelu_pytorch_tanh", "query_pre_attn_scalar": scalar, "attention_bias": False,
           "sliding_window": int(keys.need("attention.sliding_window"))}  # fmt: skip
    softcaps = {name: keys.get(name) for name in ("attn_logit_softcapping", "final_logit_softcapping")}
    out.update({k: (float(v) if v is not None else None) for k, v in softcaps.items()})
    if keys.arch == "gemma3":
        pattern = keys.get("attention.sliding_window_pattern")  # newer files; llama.cpp's default is 6
        out.update({"rope_local_base_freq": float(keys.get("rope.freq_base_swa", 10000.0)),
                    "sliding_window_pattern": int(pattern) if isinstance(pattern, int) else 6})
    return out


_BUILDERS = {"llama": _llama, "qwen2": _qwen, "qwen3": _qwen, "qwen2moe": _moe, "qwen3moe": _moe,
             "gemma2": _gemma, "gemma3": _gemma}  # fmt: skip
