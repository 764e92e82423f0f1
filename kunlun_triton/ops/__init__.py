"""Public ops, one folder per op family (`norm`, `activation`, `logits`,
`rope`, `attention`, `sampling`, `moe`, `quant`), each holding its ``@triton.jit`` kernels, its
launchers (validate, pick a config, launch; or run the torch reference where
no Triton target runs), its pure-torch reference and its specs (`spec.OpSpec`:
what doctor, bench and tune need). One name per op everywhere: function,
config key in ``autotune_configs/``, dispatch-report key, bench row, test.

Names resolve lazily, so importing this package compiles nothing and an op
family that fails to import breaks only its own ops.
"""

import functools
import importlib

from ..runtime.config_keys import set_key_provider

FAMILY_OF = {
    "rms_norm": "norm",
    "fused_add_rms_norm": "norm",
    "silu_and_mul": "activation",
    "gelu_and_mul": "activation",
    "logit_softcap": "logits",
    "rotary_embedding": "rope",
    "store_kv": "attention",
    "decode_attention": "attention",
    "extend_attention": "attention",
    "sample": "sampling",
    "greedy": "sampling",
    "top_k_renorm_probs": "sampling",
    "top_p_renorm_probs": "sampling",
    "min_p_renorm_probs": "sampling",
    "renorm_probs": "sampling",
    "moe_topk": "moe",
    "fused_experts": "moe",
    "per_token_quant_int8": "quant",
    "int8_scaled_mm": "quant",
}
# Helpers next to an op: the decode step's split-KV scratch and paged metadata.
HELPERS = {"decode_workspace": "attention", "DecodeWorkspace": "attention", "decode_split_plan": "attention",
           "build_kv_indices": "attention"}

__all__ = sorted({**FAMILY_OF, **HELPERS})


@functools.cache
def _config_key_rules() -> dict:
    from .spec import config_key_rules

    return config_key_rules()


# Config files are checked against the specs' keys when first read (never per call).
set_key_provider(_config_key_rules)


def __getattr__(name):
    family = FAMILY_OF.get(name) or HELPERS.get(name)
    if family is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{family}"), name)


def __dir__():
    return __all__
