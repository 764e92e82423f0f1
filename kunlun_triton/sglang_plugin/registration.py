"""What the general plugin registers with SGLang, once per process.

- attention backend ``kunlun_triton`` (``register_attention_backend`` and the
  CLI choices, so ``--attention-backend kunlun_triton`` parses);
- sampling backend ``kunlun_triton`` (``register_sampler_backend``) and the
  per-request seed hook;
- fused-op forwards under the platform's dispatch key ``kunlun``;
- a ``Scheduler`` RPC method that dumps the dispatch report (``report.py``).
"""

from __future__ import annotations

import logging

logger = logging.getLogger("kunlun_triton.sglang_plugin")

_done = False

SEED_HOOK_TARGET = "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.from_schedule_batch"


def register_attention() -> None:
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS, register_attention_backend

    from .platform import ATTENTION_BACKEND

    if ATTENTION_BACKEND not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([ATTENTION_BACKEND])
    if ATTENTION_BACKEND not in ATTENTION_BACKENDS:

        @register_attention_backend(ATTENTION_BACKEND)
        def _create(runner):
            from .attention import create_kunlun_triton_backend

            return create_kunlun_triton_backend(runner)


def register_sampling() -> None:
    from sglang.srt.layers import sampler as sampler_mod
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from .platform import SAMPLING_BACKEND

    if SAMPLING_BACKEND not in getattr(sampler_mod, "_CUSTOM_SAMPLER_FACTORIES", {}):
        from .sampler import create_sampler

        sampler_mod.register_sampler_backend(SAMPLING_BACKEND, create_sampler)
    if not any(h for _, h, _ in HookRegistry._hooks.get(SEED_HOOK_TARGET, [])
               if getattr(h, "__name__", "") == "fill_request_seeds"):  # fmt: skip
        from .sampler import fill_request_seeds

        HookRegistry.register(SEED_HOOK_TARGET, fill_request_seeds, HookType.AFTER)
        HookRegistry.apply_hooks()


def register_all() -> None:
    """Idempotent: SGLang calls the general plugin in every process."""
    global _done
    if _done:
        return
    from .fused_ops import register_fused_ops
    from .platform import DISPATCH_KEY

    from .report import install_scheduler_rpc

    register_attention()
    register_sampling()
    register_fused_ops(DISPATCH_KEY)
    install_scheduler_rpc()
    _done = True
