"""Teacher-forced accuracy of an fp8 KV cache against the model-dtype cache.

    python scripts/fp8_kv_accuracy.py [--model /work/models/smollm2-135m-instruct-bf16] [--tokens 256]

HF transformers runs the model (its dtype, bf16 for the SmolLM2 checkpoint);
every attention layer goes through our kernels as a server's decode sees
the cache: the layer's K/V are written to a pool by ``store_kv`` (fp8:
integer encode, scale 1.0) and ``extend_attention`` in unified mode reads
every key, the token's own included, back from the pool (fp8: integer
decode in the loop). One forward per cache dtype over the same tokens;
reported per fp8 format against the model-dtype pool: top-1 agreement of
the next-token argmax and the mean |log p(next token) difference| over the
text's positions. Needs transformers (the sglang venv has it); no SGLang.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# --backend torch: the same ops on their torch references (torch's float8 casts; the kernels
# equal them: tests/ops/attention/test_fp8_*.py), minutes faster under the CPU interpreter.
_backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "triton"
os.environ["KUNLUN_TRITON_BACKEND"] = _backend  # triton: measure the kernels, never a fallback
from kunlun_triton.runtime.env import env_is_set  # noqa: E402 - no torch, no kernels imported

if not env_is_set("TRITON_INTERPRET"):
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

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
    from transformers import AttentionInterface

    name = f"kt_{pool_dtype}".replace(".", "_")
    AttentionInterface.register(name, kernel_attention(pool_dtype))
    model.config._attn_implementation = name
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="/work/models/smollm2-135m-instruct-bf16")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--backend", choices=("triton", "torch"), default="triton",
                        help="our Triton kernels (default) or the ops' torch references")
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    ids = tokenizer(TEXT * 4, return_tensors="pt")["input_ids"][:, : args.tokens]
    positions = ids.shape[1] - 1
    print(f"{args.model}: {model.dtype}, {positions} teacher-forced positions, ops on {args.backend}")
    results = {}
    for label, pool_dtype in POOLS.items():
        start = time.time()
        results[label] = log_probs(model, ids, pool_dtype)[:-1]
        print(f"  forward with a {label} cache: {time.time() - start:.0f} s", flush=True)
    base = results["model"]
    targets = ids[0, 1:]
    base_lp = base.gather(1, targets[:, None])[:, 0]
    print(f"| KV cache | top-1 agreement vs {model.dtype} cache | mean abs logprob diff (next token) |")
    print("|---|---|---|")
    for label in ("fp8_e4m3", "fp8_e5m2"):
        lp = results[label]
        agree = (lp.argmax(-1) == base.argmax(-1)).float().mean().item()
        diff = (lp.gather(1, targets[:, None])[:, 0] - base_lp).abs().mean().item()
        print(f"| {label} | {agree:.4f} ({positions} positions) | {diff:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
