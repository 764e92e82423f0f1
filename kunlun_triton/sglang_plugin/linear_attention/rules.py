"""Server options for hybrid gated-delta-net models on the kunlun platform.

SGLang 0.5.23 caches a hybrid model's prefixes in its mamba radix cache
with one of two strategies (``--mamba-radix-cache-strategy``):

- ``extra_buffer`` (its default with the overlap scheduler): the prefill
  kernels hand back the state at every chunk boundary (FLA's per-chunk
  ``h``) and SGLang copies the one at the cache's track interval into a
  spare slot. Our prefill keeps no per-chunk states, so the platform
  answers ``support_mamba_cache_extra_buffer()`` with False;
- ``no_buffer``: the radix tree keeps a copy of a request's states where the
  request ends (its prompt, then prompt + answer), and a later request
  whose tokens begin with that path starts from the copy. That is what our
  kernels serve: a second turn reuses the first's state. It needs the
  overlap scheduler off (``--disable-overlap-schedule``).

`apply_hybrid_defaults` picks ``no_buffer`` (overlap off) when the strategy is
left at ``auto``; `UNSUPPORTED` refuses at start what SGLang's hybrid path
cannot serve here, naming the flag: extra_buffer, speculative decoding, and
prefill chunks mixed into decode batches (``--enable-mixed-chunk``: one prompt
of the slow test got other tokens than HF there, not yet understood).
"""

from __future__ import annotations

STRATEGY_FLAG = "--mamba-radix-cache-strategy"
EXTRA_BUFFER = ("extra_buffer", "extra_buffer_lazy")


def is_gated_delta_net(config: dict) -> bool:
    """A config.json (or its text_config) with gated-delta-net layers (Qwen3-Next, Qwen3.5 / 3.6)."""
    text = config.get("text_config") or config
    return "linear_num_value_heads" in text and "linear_conv_kernel_dim" in text


def apply_hybrid_defaults(server_args, config: dict) -> None:
    """`config`: the model's config.json. SGLang resolves ``auto`` to ``no_buffer``
    once the overlap scheduler is off."""
    if not is_gated_delta_net(config) or getattr(server_args, "disable_radix_cache", False):
        return
    if (getattr(server_args, "mamba_radix_cache_strategy", "auto") or "auto") == "auto":
        server_args.disable_overlap_schedule = True


def extra_buffer(args, config):
    strategy = getattr(args, "mamba_radix_cache_strategy", None)
    if not is_gated_delta_net(config) or strategy not in EXTRA_BUFFER:
        return None
    return f"the {strategy} prefix cache ({STRATEGY_FLAG} {strategy})"


def speculative(args, config):
    algo = getattr(args, "speculative_algorithm", None)
    if not is_gated_delta_net(config) or not algo:
        return None
    return f"speculative decoding on gated-delta-net layers (--speculative-algorithm {algo})"


def mixed_chunk(args, config):
    if not is_gated_delta_net(config) or not getattr(args, "enable_mixed_chunk", False):
        return None
    return "prefill chunks mixed into decode batches (--enable-mixed-chunk)"


EXTRA_BUFFER_ADVICE = (f"use {STRATEGY_FLAG} no_buffer with --disable-overlap-schedule (the platform's choice when "
                       "the strategy is left at auto): second turns still reuse the cached prefix's state")  # fmt: skip
MIXED_CHUNK_ADVICE = ("drop --enable-mixed-chunk: a tiny Qwen3-Next gave other tokens than HF transformers for a "
                      "prompt whose prefill was mixed into decode steps (docs/linear-attention.md)")  # fmt: skip
SPECULATIVE_ADVICE = ("drop --speculative-algorithm: target verify on linear-attention layers needs per-draft state "
                      "snapshots that only SGLang's CUDA kernels write")  # fmt: skip
