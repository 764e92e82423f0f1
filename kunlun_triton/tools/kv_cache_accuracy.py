"""Teacher-forced accuracy of an fp8 KV cache against the model-dtype cache, through our ops.

HF transformers runs the model in its dtype (bf16 for SmolLM2's bf16
checkpoint); every attention layer goes through our ops as a server's decode
sees the cache: the layer's K/V are written to a pool by ``store_kv`` (fp8:
integer encode, scale 1.0) and ``extend_attention`` in unified mode reads
every key, the token's own included, back from the pool (fp8: integer decode
in the loop). One forward per cache dtype over the same tokens; per fp8
format, against the model-dtype pool on the same model (the oracle: the cache
a server keeps without ``--kv-cache-dtype``): top-1 agreement of the
next-token argmax and the mean |log p(next token) difference|.

Used by ``scripts/fp8_kv_accuracy.py`` (the published numbers) and
``tests/regression/test_regression_sglang_fp8_kv.py`` (the floors). Needs
transformers (the sglang venv has it), no SGLang. Which implementation the
ops run is the caller's choice (``KUNLUN_TRITON_BACKEND``; the dispatch
report says what ran).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

POOLS = {"model": None, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
TEXT = (
    "A Triton-first kernel backend for LLM inference. Every hot op of a decoder model's serving path is one "
    "Triton kernel written once in the portable subset of Triton, lowered by whichever Triton target the "
    "machine has, and handed to SGLang through its out-of-tree platform plugin interface. Baidu Kunlun XPUs "
    "are the first-class target; NVIDIA and AMD GPUs and the CPU are the others. Decode is bound by the bytes "
    "of the KV cache: storing keys and values in eight bits halves them, and the attention loop turns the bytes "
    "back into numbers with integer operations, so cards without FP8 hardware serve the same cache. The question "
    "this script answers is how much of the model's answer that costs, token by token, on a real checkpoint."
)


@dataclass(frozen=True)
class Agreement:
    """One cache format against the model-dtype cache over the same positions."""

    label: str
    same_top1: int
    positions: int
    mean_abs_logprob_diff: float

    @property
    def top1(self) -> float:
        return self.same_top1 / self.positions


def kernel_attention(pool_dtype):
    """An HF attention function running store_kv + unified extend_attention (batch 1)."""
    from kunlun_triton.ops import extend_attention, store_kv

    def attend(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        # query [1, Hq, T, D], key/value [1, Hkv, T, D] (after RoPE)
        q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))
        tokens, dtype = q.shape[0], q.dtype
        k_pool = torch.empty(tokens, k.shape[1], k.shape[2], dtype=pool_dtype or dtype)
        v_pool = torch.empty(tokens, v.shape[1], v.shape[2], dtype=pool_dtype or dtype)
        slots = torch.arange(tokens, dtype=torch.int32)
        store_kv(k, v, k_pool, v_pool, slots)
        o = torch.empty(tokens, q.shape[1], v.shape[2], dtype=dtype)
        indptr = torch.tensor([0, tokens], dtype=torch.int32)
        scale = scaling if scaling is not None else q.shape[-1] ** -0.5
        extend_attention(q, k, v, o, k_pool, v_pool, indptr, indptr, slots, tokens, scale, unified_kv=True)
        return o.unsqueeze(0), None  # [1, T, Hq, Dv]

    return attend


def log_probs(model, ids, pool_dtype):
    """log_softmax (float32) at every position of `ids` [1, T], attention through our ops
    with the KV pool in `pool_dtype` (None: the model's dtype)."""
    from transformers import AttentionInterface

    name = f"kt_{pool_dtype}".replace(".", "_")
    AttentionInterface.register(name, kernel_attention(pool_dtype))
    previous = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        with torch.no_grad():
            logits = model(ids).logits[0].float()
    finally:
        model.config._attn_implementation = previous  # the model stays HF's own otherwise
    return torch.log_softmax(logits, dim=-1)


def load(path):
    """(model in its checkpoint's dtype, eval; tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path, dtype="auto").eval(), AutoTokenizer.from_pretrained(path)


def hf_log_probs(model, ids):
    """log_softmax (float32) with the model's own HF attention: the check that the
    model-dtype pool through our ops is the model (in bf16 the two attentions round
    differently; HF's eager and sdpa differ from each other as much)."""
    with torch.no_grad():
        return torch.log_softmax(model(ids).logits[0].float(), dim=-1)


def text_ids(tokenizer, tokens: int):
    """The first `tokens` ids of the fixed English text ([1, tokens])."""
    return tokenizer(TEXT * 4, return_tensors="pt")["input_ids"][:, :tokens]


def agreement(label, lp, base, ids) -> Agreement:
    """`lp` against `base`: log-softmax [T, V] at the positions that predict ids[0, 1:]."""
    lp, base, targets = lp[:-1], base[:-1], ids[0, 1:, None]
    same = int((lp.argmax(-1) == base.argmax(-1)).sum())
    diff = (lp.gather(1, targets) - base.gather(1, targets)).abs().mean().item()
    return Agreement(label, same, len(targets), diff)


def forwards(model, ids, labels=tuple(POOLS), say=None) -> dict:
    """{label: log_probs} for each cache in `labels` (keys of POOLS)."""
    results = {}
    for label in labels:
        start = time.time()
        results[label] = log_probs(model, ids, POOLS[label])
        if say:
            say(f"  forward with a {label} cache: {time.time() - start:.0f} s")
    return results


def markdown(results: dict[str, Agreement], model_dtype, baseline: Agreement | None = None) -> str:
    """The published table (docs/fp8-kv-cache.md); `baseline`: the model-dtype pool against
    HF's own attention, for scale."""
    name = str(model_dtype).replace("torch.", "").replace("bfloat16", "bf16").replace("float16", "fp16")
    lines = [f"| KV cache | top-1 agreement vs the {name} cache | mean abs logprob diff of the next token |",
             "|---|---|---|"]  # fmt: skip
    rows = [(r.label, r) for r in results.values()]
    if baseline is not None:
        rows.append((f"{name} (for scale: vs HF's own attention instead of the {name} pool)", baseline))
    for label, r in rows:
        lines.append(f"| {label} | {r.top1:.4f} ({r.same_top1} / {r.positions} positions) "
                     f"| {r.mean_abs_logprob_diff:.4f} |")  # fmt: skip
    return "\n".join(lines)
