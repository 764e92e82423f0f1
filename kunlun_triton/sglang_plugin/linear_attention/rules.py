"""Server options for hybrid gated-delta-net models on the kunlun platform.

SGLang 0.5.23 caches a hybrid model's prefixes in its mamba radix cache
with either strategy (``--mamba-radix-cache-strategy``): ``extra_buffer``
(its default with the overlap scheduler; the kernels snapshot the states at
the cache's track points into spare slots: gdn.py) or ``no_buffer`` (the
radix tree copies a request's states where it ends). Both are served, so the
platform answers ``support_mamba_cache_extra_buffer()`` with True.

`apply_hybrid_defaults` keeps Qwen3.5's decode on our kernels on a card (below);
`UNSUPPORTED` refuses at start what SGLang's hybrid path cannot serve here,
naming the flag: speculative decoding.
"""

from __future__ import annotations

import os

# Qwen3.5's decode fuses the projection split with the conv in one SGLang
# Triton kernel where SGLang's `_is_cuda` holds (read once, when
# ``models/qwen3_5.py`` is imported): a tuple ``mixed_qkv`` that gdn.py leaves
# to SGLang. Off by default here, so decode runs our split and conv kernels.
FUSED_DECODE_PROJ_CONV_ENV = "SGLANG_ENABLE_GDN_DECODE_FUSED_PROJ_CONV"


def is_gated_delta_net(config: dict) -> bool:
    """A config.json (or its text_config) with gated-delta-net layers (Qwen3-Next, Qwen3.5 / 3.6)."""
    text = config.get("text_config") or config
    return "linear_num_value_heads" in text and "linear_conv_kernel_dim" in text


def apply_hybrid_defaults(config: dict) -> None:
    """`config`: the model's config.json. An explicit setting of the variable is kept (then that
    decode runs SGLang's kernel, as the dispatch report shows); the schedulers SGLang starts next
    inherit the default."""
    if is_gated_delta_net(config):
        os.environ.setdefault(FUSED_DECODE_PROJ_CONV_ENV, "0")


def speculative(args, config):
    algo = getattr(args, "speculative_algorithm", None)
    if not is_gated_delta_net(config) or not algo:
        return None
    return f"speculative decoding on gated-delta-net layers (--speculative-algorithm {algo})"


SPECULATIVE_ADVICE = ("drop --speculative-algorithm: target verify on linear-attention layers needs per-draft state "
                      "snapshots that only SGLang's CUDA kernels write")  # fmt: skip
