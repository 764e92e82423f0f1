"""Data-parallel attention (``--enable-dp-attention``) on the kunlun platform.

Each attention-DP rank runs its own batch; around the MoE SGLang gathers
every rank's hidden states into one buffer and scatters them back
(``layers/dp_attention.py``). The gathers and scatters themselves are
``GroupCoordinator`` collectives, which collectives.py takes (the uneven
``all_gatherv`` / ``reduce_scatterv`` SGLang calls under expert parallelism
too). What
this module adds are the CUDA-only calls around them (docs/scale-out.md,
"What the SGLang seam must hook"):

- ``dp_attention.memcpy`` copies a rank's rows into the gathered buffer
  with SGLang's ``memcpy_triton`` unless SGLang's CPU engine is on. The
  hook runs SGLang's own slice copy (``memcpy_cpu``) instead: one
  ``copy_`` of the rows, on any device, with no kernel of SGLang's.
- ``ForwardBatch.prepare_mlp_sync_batch`` stages the ranks' token counts in
  pinned memory whenever SGLang's CPU engine is off. Pinning needs the
  device runtime, which a CPU-only host (development mode) lacks ("Found no
  NVIDIA driver"). There the hook builds that tensor unpinned; on a card
  it changes nothing.

`check_server_args` refuses, at start and naming the flag, what cannot run
with DP attention on the platform: two-batch overlap (CUDA streams and
events) and the environment variables that switch on SGLang's fp8 gather
and its pad-row masking kernel.
"""

from __future__ import annotations

import torch

from kunlun_triton.runtime.env import env_str

MEMCPY_HOOK = "sglang.srt.layers.dp_attention.memcpy"
MLP_SYNC_HOOK = "sglang.srt.model_executor.forward_batch_info.ForwardBatch.prepare_mlp_sync_batch"

# SGLang environment switches of the DP-attention path whose kernels the platform does not take over.
_REFUSED_ENV = ("SGLANG_DP_USE_GATHERV", "SGLANG_OPT_MASK_DP_PAD_MOE")


def dp_gathered() -> bool:
    """Whether the MoE input is DP attention's gathered buffer: each rank's
    rows padded to the longest, the pad rows never written (SGLang's router
    reads them and the scatter drops their outputs)."""
    from sglang.srt.runtime_context import get_parallel

    return get_parallel().attn_dp_size > 1


class UnsupportedDPAttention(ValueError):
    """A DP-attention setting that cannot run on the kunlun platform."""


def check_server_args(server_args) -> None:
    """Refuse, at start, DP-attention settings whose SGLang paths are CUDA-only."""
    if not getattr(server_args, "enable_dp_attention", False):
        return
    for flag in ("enable_two_batch_overlap", "enable_single_batch_overlap"):
        if getattr(server_args, flag, False):
            raise UnsupportedDPAttention(
                f"kunlun-triton: --{flag.replace('_', '-')} with --enable-dp-attention is not supported on the "
                "kunlun platform (its overlap runs on CUDA streams and events); drop the flag."
            )
    for name in _REFUSED_ENV:
        if (env_str(name) or "").lower() in ("1", "true", "yes"):
            raise UnsupportedDPAttention(
                f"kunlun-triton: {name} with --enable-dp-attention is not supported on the kunlun platform "
                "(SGLang's CUDA-tuned gather variants); unset it."
            )


def memcpy(original, dst, src, dim, offset, sz, offset_src):
    """``dp_attention.memcpy`` (AROUND): SGLang's slice copy, not its Triton kernel."""
    from sglang.srt.layers import dp_attention

    dp_attention.memcpy_cpu(dst, src, dim, offset, sz, offset_src)


class _UnpinnedTorch:
    """``torch`` for forward_batch_info, with ``tensor(..., pin_memory=...)`` unpinned."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def tensor(*args, pin_memory=False, **kwargs):
        return torch.tensor(*args, **kwargs)


def prepare_mlp_sync_batch(original, self, *args, **kwargs):
    """``ForwardBatch.prepare_mlp_sync_batch`` (AROUND): on a host without the
    device runtime, its token counts are staged unpinned (see the module doc)."""
    if torch.cuda.is_available():
        return original(self, *args, **kwargs)
    from sglang.srt.model_executor import forward_batch_info

    forward_batch_info.torch = _UnpinnedTorch()
    try:
        return original(self, *args, **kwargs)
    finally:
        forward_batch_info.torch = torch


HOOKS = {MEMCPY_HOOK: memcpy, MLP_SYNC_HOOK: prepare_mlp_sync_batch}


def hook_dp_attention() -> None:
    """Register `HOOKS` (AROUND) with SGLang's HookRegistry (install's table applies it, kunlun platform only)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, hook in HOOKS.items():
        HookRegistry.register(target, hook, HookType.AROUND)
