"""SGLang's per-model rules, as they apply on the kunlun platform.

SGLang 0.5.23 keeps, per architecture, lists of the attention backends a
model may run on and a choice of MoE runner, written for its own backends
and CUDA kernels:

- gpt-oss (``model_hook.handle_model_specific_adjustments``) asserts its
  attention backend is one of SGLang's that serve attention sinks and
  sliding windows (``triton``, ``fa3``, ...). Ours serves both (the sink in
  the softmax of decode and extend, the window per layer as SGLang passes
  it), so for the models listed in `SERVED_LIKE_SGLANG_TRITON` the check
  reads our backend under the name of SGLang's Triton backend, whose
  features it matches. Other models' lists are left alone.
- gpt-oss's override picks the ``triton_kernel`` MoE runner (the
  ``triton_kernels`` package's CUDA kernels, which also transpose the
  expert weights) whenever that package imports. On our platform its
  experts run `fused_experts` through SGLang's Triton runner's layout, so
  `pin_moe_runner` pins ``triton`` when the user left the runner unset.
- gpt-oss's override serves MXFP4 checkpoints in bf16 whatever ``--dtype``
  says (SGLang's MXFP4 kernels take bf16). Ours decode MXFP4 into any
  compute dtype, so on the kunlun platform `keep_explicit_dtype` drops that
  override when the user gave a ``--dtype`` (``auto`` still gets bf16).
- gpt-oss builds its attention and router in the checkpoint's dtype
  (``config.dtype``), not the dtype it serves in: where they differ (an
  MXFP4 checkpoint is served in bf16, which development mode and targets
  without complete bf16 serve in fp16) its first matmul fails on mixed
  dtypes. `build_in_serving_dtype` builds it in the serving dtype (the
  default dtype SGLang's loader sets while the model is constructed).
"""

from __future__ import annotations

from .mode import on_card, selected
from .names import ATTENTION_BACKEND
from .support import model_config

ALLOW_LIST_HOOK = "sglang.srt.arg_groups.model_hook.attention_backends_of"
OVERRIDE_PROVIDER_HOOK = "sglang.srt.arg_groups.overrides._invoke_provider"
DTYPE_OVERRIDDEN_BY = ("_gpt_oss_overrides",)
GPT_OSS_INIT_HOOK = "sglang.srt.models.gpt_oss.GptOssForCausalLM.__init__"
SERVED_LIKE_SGLANG_TRITON = ("GptOssForCausalLM",)
MOE_RUNNER_PINNED = {"GptOssForCausalLM": "triton"}


def _architecture(server_args) -> str | None:
    archs = model_config(getattr(server_args, "model_path", None)).get("architectures") or []
    return archs[0] if archs else None


def backends_for_allow_lists(original, cfg):
    """``attention_backends_of`` as SGLang's per-model allow-lists see it (an
    AROUND hook on model_hook's name only): our backend reads as ``triton``
    for the architectures whose features it serves as SGLang's Triton does."""
    prefill, decode = original(cfg)
    if ATTENTION_BACKEND not in (prefill, decode) or _architecture(cfg) not in SERVED_LIKE_SGLANG_TRITON:
        return prefill, decode
    return tuple("triton" if backend == ATTENTION_BACKEND else backend for backend in (prefill, decode))


def pin_moe_runner(server_args) -> None:
    """The MoE runner of `MOE_RUNNER_PINNED`'s architectures when
    ``--moe-runner-backend`` is left at ``auto`` (a runner the user chose
    stays, and `layers.moe.check_server_args` judges it)."""
    runner = MOE_RUNNER_PINNED.get(_architecture(server_args))
    if runner and (getattr(server_args, "moe_runner_backend", None) or "auto") == "auto":
        server_args.moe_runner_backend = runner


def keep_explicit_dtype(original, fn, server_args, hf_config):
    """SGLang's per-model override provider `fn` (an AROUND hook on the
    resolver's call), without the ``dtype`` of `DTYPE_OVERRIDDEN_BY`'s
    providers where the user passed ``--dtype``, on the kunlun platform."""
    declared = original(fn, server_args, hf_config)
    explicit = (getattr(server_args, "dtype", None) or "auto") != "auto"
    if "dtype" in declared and explicit and fn.__qualname__ in DTYPE_OVERRIDDEN_BY and (selected() or on_card()):
        declared = {key: value for key, value in declared.items() if key != "dtype"}
    return declared


def build_in_serving_dtype(original, self, config, *args, **kwargs):
    """``GptOssForCausalLM.__init__`` (an AROUND hook, kunlun platform only)
    with ``config.dtype`` the dtype the model is served in."""
    import torch

    config.dtype = torch.get_default_dtype()
    return original(self, config, *args, **kwargs)
