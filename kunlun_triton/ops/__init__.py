"""Public ops: validate inputs, pick a config, launch the Triton kernel (or the
torch reference where no Triton target runs). One module per op family.

Names resolve lazily, so importing this package compiles nothing and an op
family that fails to import breaks only its own ops.
"""

import importlib

_EXPORTS = {
    "rms_norm": "norm",
    "fused_add_rms_norm": "norm",
    "silu_and_mul": "activation",
    "gelu_and_mul": "activation",
    "rotary_embedding": "rope",
    "store_kv": "kv_cache",
    "decode_attention": "attention",
    "extend_attention": "attention",
    "sample": "sampling",
    "greedy": "sampling",
    "top_k_renorm_probs": "sampling",
    "top_p_renorm_probs": "sampling",
    "min_p_renorm_probs": "sampling",
    "renorm_probs": "sampling",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__():
    return __all__
