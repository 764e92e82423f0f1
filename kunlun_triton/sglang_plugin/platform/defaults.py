"""Server-argument defaults of the kunlun platform (``apply_server_args_defaults``).

SGLang 0.5.23 runs this after its own device rules (``handle_cpu_backends``
has already written ``intel_amx``/``torch_native`` attention and ``pytorch``
sampling for device ``cpu``), and keeps the last declaration, so what we
assign here wins. We only replace what the user did not ask for: the
user's raw input is read from ``server_args._raw_input`` (SGLang's snapshot
taken before any rule ran).
"""

from __future__ import annotations

import logging

import torch

from ...runtime import current_target, run_dtype
from ..layers.dp_attention import check_server_args as check_dp_attention
from ..layers.moe import check_server_args
from ..linear_attention.rules import apply_hybrid_defaults
from ..speculative.algorithms import apply_speculative_defaults
from .names import ATTENTION_BACKEND, LOGGER, SAMPLING_BACKEND
from .dev_mode_defaults import apply_dev_mode_defaults
from .model_rules import pin_moe_runner
from .support import check_support, check_tensor_parallel_heads, model_config

logger = logging.getLogger(LOGGER)

_UNSET = object()


def _raw(server_args, name):
    """What the user passed for `name` (None when not given), or _UNSET if unknown."""
    try:
        raw = getattr(server_args, "_raw_input")
    except Exception:
        raw = None
    if isinstance(raw, dict):
        return raw.get(name)
    return _UNSET


def _user_left_unset(server_args, name, defaults_of_others) -> bool:
    raw = _raw(server_args, name)
    if raw is _UNSET:  # no snapshot: treat SGLang's own defaults as unset
        return getattr(server_args, name, None) in (None, *defaults_of_others)
    return raw is None


def _model_dtype(model_path) -> str | None:
    cfg = model_config(model_path)
    return cfg.get("torch_dtype") or cfg.get("dtype")


def apply_dtype_policy(server_args) -> None:
    """bf16 on a target without complete bf16 support runs in fp16, said once."""
    requested = getattr(server_args, "dtype", "auto")
    wants_bf16 = requested == "bfloat16" or (
        requested == "auto" and _model_dtype(getattr(server_args, "model_path", None)) == "bfloat16"
    )
    if wants_bf16 and run_dtype(torch.bfloat16) == torch.float16:
        logger.warning(
            "kunlun-triton: bf16 is incomplete on target %s; running the model in float16 "
            "(pass --dtype float16 to silence this)",
            current_target().name,
        )
        server_args.dtype = "float16"


def apply_defaults(platform, server_args) -> None:
    check_server_args(server_args)
    check_dp_attention(server_args)

    if _user_left_unset(server_args, "attention_backend", ("intel_amx", "torch_native")):
        server_args.attention_backend = ATTENTION_BACKEND
    if _user_left_unset(server_args, "sampling_backend", ("pytorch",)):
        server_args.sampling_backend = SAMPLING_BACKEND
    if server_args.attention_backend == ATTENTION_BACKEND:
        # Our backend reads one MHA pool (sliding layers mask by position): no hybrid SWA pools.
        server_args.disable_hybrid_swa_memory = True
        pin_moe_runner(server_args)
    check_tensor_parallel_heads(server_args)
    apply_hybrid_defaults(model_config(getattr(server_args, "model_path", None)))
    check_support(server_args, ours=server_args.attention_backend == ATTENTION_BACKEND)
    apply_speculative_defaults(server_args)

    if not platform.capabilities.graph_capture:
        from sglang.srt.model_executor.cuda_graph_config import Backend, Phase, with_phase

        config = getattr(server_args, "cuda_graph_config", None)
        if config is not None:
            config = with_phase(config, Phase.DECODE, backend=Backend.DISABLED)
            server_args.cuda_graph_config = with_phase(config, Phase.PREFILL, backend=Backend.DISABLED)
        server_args.disable_cuda_graph = True

    if platform.device_type == "cpu":
        # Development mode: no custom all-reduce kernels on the host.
        server_args.disable_custom_all_reduce = True
        apply_dev_mode_defaults(server_args)

    apply_dtype_policy(server_args)
