"""Hybrid linear attention (Qwen3-Next, Qwen3.5): SGLang's gated-delta-net
layers, their gated RMSNorm and the split of their input projections on our
kernels (gdn.py, norm.py, projection.py), Qwen3-Next's CUDA-only call at
construction on the platform's device (model.py), the extra_buffer cache's
decode track mask off a card (track_mask.py), and the server options the
platform refuses (rules.py).

The install table's row calls `hook_hybrid_models` (platform scope, while
SGLang's ``model_runner`` is still importing). SGLang's ``gdn_backend``
imports ``model_runner`` at its top, so its class cannot be resolved then:
the layer hooks are armed there and applied by `apply_after_load`, from the
platform's ``post_load_model`` (after the model is built, before SGLang builds
its attention backends, GDNAttnBackend among them)."""

from __future__ import annotations

_armed = False


def _around(target: str, hook) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(target, hook, HookType.AROUND)


def hook_hybrid_models() -> None:
    global _armed
    from .model import GDN_LAYER_INIT_HOOK, build_on_platform_device
    from .projection import HOOKS as PROJECTION_HOOKS
    from .track_mask import PREPARE_DECODE_HOOK, prepare_for_decode_unpinned

    _around(GDN_LAYER_INIT_HOOK, build_on_platform_device)  # before the model is built
    _around(PREPARE_DECODE_HOOK, prepare_for_decode_unpinned)
    for target, hook in PROJECTION_HOOKS.items():  # the models' split of their input projections
        _around(target, hook)
    _armed = True


def apply_after_load(model) -> None:
    """Only for a model with linear-attention layers (SGLang's RadixLinearAttention):
    the others never import SGLang's GDN backend."""
    global _armed
    if not _armed or not any(type(m).__name__ == "RadixLinearAttention" for m in model.modules()):
        return
    from sglang.srt.plugins.hook_registry import HookRegistry

    from .gdn import DECODE_HOOK, EXTEND_HOOK, gdn_forward_decode, gdn_forward_extend
    from .norm import FUSED_GATED_NORM_HOOK, GATED_NORM_HOOK, fused_gated_norm_forward, gated_norm_forward

    _armed = False
    _around(DECODE_HOOK, gdn_forward_decode)
    _around(EXTEND_HOOK, gdn_forward_extend)
    _around(GATED_NORM_HOOK, gated_norm_forward)
    _around(FUSED_GATED_NORM_HOOK, fused_gated_norm_forward)
    HookRegistry.apply_hooks()
