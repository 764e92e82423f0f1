"""What the kunlun platform cannot serve, refused at start-up (never mid-request).

`check_support(server_args)` runs in ``apply_server_args_defaults``, before
SGLang starts a scheduler or loads a weight: each `Unsupported` entry names a
feature, how to detect it from the server arguments and the model's
``config.json``, and what to do instead. The error names the model
(its architecture), the feature and the fix. Only features served by
kunlun-triton's own attention backend are refused; a user who picks another
backend (``--attention-backend torch_native``) gets SGLang's behaviour.
The MoE-specific refusals live in `moe.check_server_args`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable

from ..linear_attention import rules as hybrid
from ..speculative.algorithms import algorithm_name, serves


class UnsupportedFeature(ValueError):
    """A model or server option that kunlun-triton cannot serve."""


def model_config(model_path) -> dict:
    """The model's config.json as a dict ({} when it cannot be read)."""
    try:
        with open(os.path.join(str(model_path), "config.json")) as f:
            return json.load(f)
    except (OSError, ValueError, TypeError):
        return {}


def model_name(model_path, config: dict) -> str:
    archs = config.get("architectures") or []
    return f"{archs[0]} ({model_path})" if archs else str(model_path)


def _speculative(args, config):
    algo = algorithm_name(getattr(args, "speculative_algorithm", None))
    if not algo or serves(algo):
        return None
    return f"speculative decoding (--speculative-algorithm {algo})"


def _ngram_without_tree_op(args, config):
    from ..speculative.ngram import worker_imports  # function-level: reads SGLang's modules

    if algorithm_name(getattr(args, "speculative_algorithm", None)) != "NGRAM" or worker_imports():
        return None
    return "NGRAM speculative decoding on this SGLang (its NGRAM worker imports sgl_kernel's tree op, not installed here)"


FP8_KV_CACHE_DTYPES = ("fp8_e4m3", "fp8_e5m2")  # decoded with integer ops: every target serves them


def _quantized_kv(args, config):
    dtype = getattr(args, "kv_cache_dtype", "auto") or "auto"
    if dtype in ("auto", "bfloat16", "float16", "float32") + FP8_KV_CACHE_DTYPES:
        return None
    return f"a quantized KV cache (--kv-cache-dtype {dtype})"


def _sparse_mla(args, config):
    return "DeepSeek sparse attention (DSA: the config's index_topk)" if config.get("index_topk") else None


def _deterministic_mla(args, config):
    # Deterministic extend reads the whole sequence from the cache (unified
    # mode); an MLA prefill arrives as multi-head attention, not in the cache.
    if getattr(args, "enable_deterministic_inference", False) and config.get("kv_lora_rank"):
        return "deterministic inference on an MLA model (--enable-deterministic-inference)"
    return None


@dataclass(frozen=True)
class Unsupported:
    key: str  # short name, used by the supported-models table
    detect: Callable[[object, dict], str | None]  # -> the feature as the user asked for it, or None
    advice: str


UNSUPPORTED = (
    Unsupported("other speculative algorithms", _speculative,
                "use --speculative-algorithm EAGLE, EAGLE3, STANDALONE or NGRAM (the algorithms the kunlun_triton "
                "attention backend verifies), or drop --speculative-algorithm"),
    Unsupported("NGRAM on SGLang 0.5.21 without sgl_kernel", _ngram_without_tree_op,
                "use SGLang 0.5.22 or newer (its tree op is routed to SGLang's Triton kernel), or "
                "--speculative-algorithm STANDALONE or EAGLE"),
    Unsupported("speculative decoding with gated delta net", hybrid.speculative, hybrid.SPECULATIVE_ADVICE),
    Unsupported("quantized KV cache other than fp8", _quantized_kv,
                "use --kv-cache-dtype auto (the KV cache in the model's dtype), fp8_e4m3 or fp8_e5m2"),
    Unsupported("sparse MLA (DSA)", _sparse_mla,
                "serve it with --attention-backend torch_native, or on a GPU with SGLang's own backends"),
    Unsupported("deterministic MLA", _deterministic_mla,
                "drop --enable-deterministic-inference, or serve it with SGLang's own backends on a GPU"),
)  # fmt: skip


def _text_config(config: dict) -> dict:
    return config.get("text_config") or config


def check_tensor_parallel_heads(server_args) -> None:
    """Refuse at start-up a model whose attention heads cannot be split over
    ``--tp-size`` (SGLang's weight loader would fail mid-load with a slice
    error). SGLang's rule: the query heads divide by the TP size; the KV heads
    divide by it, or, when fewer, divide it (each KV head is replicated).
    MLA models keep one latent KV head: only their query heads count."""
    tp = int(getattr(server_args, "tp_size", 1) or 1)
    if tp <= 1:
        return
    config = model_config(getattr(server_args, "model_path", None))
    text = _text_config(config)
    q = text.get("num_attention_heads")
    if not isinstance(q, int) or q <= 0:
        return
    kv = text.get("num_key_value_heads") or q
    problems = []
    if q % tp:
        problems.append(f"the {q} query heads do not divide by {tp}")
    if not text.get("kv_lora_rank") and (kv % tp if kv >= tp else tp % kv):
        problems.append(f"the {kv} KV heads neither divide by {tp} nor divide it")
    if problems:
        raise UnsupportedFeature(
            f"kunlun-triton: {model_name(server_args.model_path, config)} has {q} query heads and {kv} KV heads, "
            f"which --tp-size {tp} cannot split ({'; '.join(problems)}): use a --tp-size that divides the query "
            "heads and divides, or is a multiple of, the KV heads."
        )


def check_support(server_args, ours: bool) -> None:
    """Raise `UnsupportedFeature` for the first feature kunlun-triton's backend
    (in use when `ours`) cannot serve."""
    if not ours:
        return
    config = model_config(getattr(server_args, "model_path", None))
    for entry in UNSUPPORTED:
        asked = entry.detect(server_args, config)
        if asked:
            raise UnsupportedFeature(
                f"kunlun-triton: {model_name(server_args.model_path, config)} with {asked} is not supported "
                f"by the kunlun_triton attention backend: {entry.advice}."
            )
