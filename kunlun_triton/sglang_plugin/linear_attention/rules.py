"""Server options for hybrid gated-delta-net models on the kunlun platform.

SGLang 0.5.23 caches a hybrid model's prefixes in its mamba radix cache
with either strategy (``--mamba-radix-cache-strategy``): ``extra_buffer``
(its default with the overlap scheduler; the kernels snapshot the states at
the cache's track points into spare slots: gdn.py) or ``no_buffer`` (the
radix tree copies a request's states where it ends). Both are served, so the
platform answers ``support_mamba_cache_extra_buffer()`` with True.

`UNSUPPORTED` refuses at start what SGLang's hybrid path cannot serve here,
naming the flag: speculative decoding.
"""

from __future__ import annotations


def is_gated_delta_net(config: dict) -> bool:
    """A config.json (or its text_config) with gated-delta-net layers (Qwen3-Next, Qwen3.5 / 3.6)."""
    text = config.get("text_config") or config
    return "linear_num_value_heads" in text and "linear_conv_kernel_dim" in text


def speculative(args, config):
    algo = getattr(args, "speculative_algorithm", None)
    if not is_gated_delta_net(config) or not algo:
        return None
    return f"speculative decoding on gated-delta-net layers (--speculative-algorithm {algo})"


SPECULATIVE_ADVICE = ("drop --speculative-algorithm: target verify on linear-attention layers needs per-draft state "
                      "snapshots that only SGLang's CUDA kernels write")  # fmt: skip
