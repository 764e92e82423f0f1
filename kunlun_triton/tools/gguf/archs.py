"""Each GGUF architecture's tensor names and layout rules, as HF checkpoint tensors.

llama.cpp renames HF tensors (``model.layers.N.self_attn.q_proj.weight`` ->
``blk.N.attn_q.weight``) and changes a few on the way (convert_hf_to_gguf.py):

- Llama: the q/k projections are permuted for llama.cpp's rope (pairs
  ``(i, i + d/2)`` made adjacent): undone here, so the checkpoint uses HF's
  rotate-half rope. Qwen and Gemma are stored unpermuted;
- Gemma 2/3: every ``*norm.weight`` is stored with the +1 of Gemma's
  ``(1 + w) * x`` folded in: subtracted here (exact in float32 for the
  weights of trained models: |w| < 2 and the sum kept its low bits);
- MoE (qwen2moe / qwen3moe): the experts of a layer are one 3-D tensor
  ``[n_expert, out, in]`` each for gate / up / down: split into HF's
  ``mlp.experts.E.{gate,up,down}_proj.weight``; the shared expert's gate is
  stored 1-D and becomes ``[1, hidden]``.

A tensor name with no counterpart in its architecture is refused by name.
"""

from __future__ import annotations

import numpy as np

from ..checkpoint_files import ConvertError

TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# GGUF tensor name after "blk.N." -> HF name after "model.layers.N."
ATTENTION = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
}
QKV_BIAS = {"attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
            "attn_v.bias": "self_attn.v_proj.bias"}  # fmt: skip
QK_NORM = {"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
MLP = {"ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
       "ffn_down.weight": "mlp.down_proj.weight"}  # fmt: skip
PRE_NORMS = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight"}
# Gemma 2/3 norm both sides of attention and MLP; llama.cpp's ffn_norm is the pre-MLP one
GEMMA_NORMS = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
ROUTER = {"ffn_gate_inp.weight": "mlp.gate.weight"}
SHARED_EXPERT = {
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
}
EXPERTS = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj", "ffn_down_exps.weight": "down_proj"}

LAYER_NAMES = {
    "llama": {**PRE_NORMS, **ATTENTION, **MLP},
    "qwen2": {**PRE_NORMS, **ATTENTION, **QKV_BIAS, **MLP},
    "qwen3": {**PRE_NORMS, **ATTENTION, **QK_NORM, **MLP},
    "qwen2moe": {**PRE_NORMS, **ATTENTION, **QKV_BIAS, **ROUTER, **SHARED_EXPERT},
    "qwen3moe": {**PRE_NORMS, **ATTENTION, **QK_NORM, **ROUTER},
    "gemma2": {**GEMMA_NORMS, **ATTENTION, **MLP},
    "gemma3": {**GEMMA_NORMS, **ATTENTION, **QK_NORM, **MLP},
}
ARCHITECTURES = tuple(LAYER_NAMES)
MOE = ("qwen2moe", "qwen3moe")
NORM_PLUS_ONE = ("gemma2", "gemma3")


def _split(name: str):
    """("blk", layer, rest) of a block tensor's name, or None."""
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
        return int(parts[1]), parts[2]
    return None


def check_name(arch: str, name: str) -> None:
    """A ConvertError unless GGUF tensor `name` has a counterpart in `arch`'s HF model."""
    if name in TOP_NAMES:
        return
    block = _split(name)
    if block and (block[1] in LAYER_NAMES[arch] or (arch in MOE and block[1] in EXPERTS)):
        return
    raise ConvertError(f"GGUF tensor {name!r} has no {arch} counterpart; nothing written")


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's convert permutation of a q or k projection [n_head*d, hidden]:
    it wrote ``w.reshape(n_head, 2, d/2, ...).swapaxes(1, 2)``."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_tensors(arch: str, name: str, data: np.ndarray, config: dict):
    """[(HF name, float32 array)] of GGUF tensor `name` (the array already float32,
    in numpy's dimension order); more than one for a MoE layer's experts."""
    check_name(arch, name)
    if arch in NORM_PLUS_ONE and name.endswith("norm.weight"):
        data = data - np.float32(1.0)
    if name in TOP_NAMES:
        return [(TOP_NAMES[name], data)]
    layer, rest = _split(name)
    prefix = f"model.layers.{layer}."
    if rest in EXPERTS:
        return [(f"{prefix}mlp.experts.{e}.{EXPERTS[rest]}.weight", np.ascontiguousarray(data[e]))
                for e in range(data.shape[0])]
    if arch == "llama" and rest == "attn_q.weight":
        data = unpermute(data, config["num_attention_heads"])
    elif arch == "llama" and rest == "attn_k.weight":
        data = unpermute(data, config["num_key_value_heads"])
    elif rest == "ffn_gate_inp_shexp.weight":
        data = data.reshape(1, -1)
    return [(prefix + LAYER_NAMES[arch][rest], data)]
