"""Mixture-of-experts layers on our ops: SGLang 0.5.23's ``TopK`` router runs
`moe_topk` and its ``UnquantizedFusedMoEMethod`` (the experts of an
unquantized ``FusedMoE``) runs `fused_experts`.

Both classes are ``BaseFusedOp``s, so the seam is the one the other fused ops
use: a forward registered under our dispatch key for the EXACT class (the
install table registers them). A model's shared experts are a plain MLP
beside ``FusedMoE`` and keep SGLang's dense path (our RMSNorm/SiLU forwards
apply there as anywhere).

Anything our ops do not compute falls back per call to the class's
``forward_native`` (what our platform ran before): custom routing
functions, fused shared-expert slots, EPLB remapping, sqrtsoftplus
scoring, SwiGLU-OAI's ``swiglu_limit`` alone,
non-gated or exotic activations. gpt-oss's experts (biases, interleaved
gate/up rows, the clamped SwiGLU of ``gemm1_alpha`` / ``gemm1_clamp_limit``)
run fused_experts' epilogues. What cannot run on our target at all fails
at start with an error saying so (`check_server_args`, `check_model`):
an all-to-all backend (--moe-a2a-backend), an MoE runner backend other
than triton, and quantized MoE other than W8A8-INT8 and MXFP4 (SGLang's
kernels for those are CUDA-only; MXFP4 experts: layers/mxfp4.py).

Expert parallelism (``--ep-size``, a2a backend none): SGLang's
``StandardDispatcher`` leaves every token on every rank and maps the
router's global ids through its one ``local_expert_mapping`` (-1 for
another rank's expert) before the experts run; each rank's ``FusedMoE``
holds only its local experts' weights, and the ranks' partial sums meet in
the all-reduce after the experts (our communicator: collectives.py).
fused_experts runs with ``ids_may_be_invalid`` there, so a -1 slot adds
exactly zero, top-1 routing included.
``W8A8Int8MoEMethod.apply`` is hooked (`int8_experts_apply`, kunlun
platform only) to run fused_experts with ``use_int8_w8a8``.

``routed_scaling_factor``: SGLang's CUDA Triton runner multiplies the expert
sum by it and models skip their own multiply when ``is_cuda()``; elsewhere
the models multiply themselves (the native path does not). The experts
forward does what the model expects on the machine it runs on.
"""

from __future__ import annotations

import logging

import torch

from ..platform.mode import dev_mode
from .dp_attention import dp_gathered

logger = logging.getLogger("kunlun_triton.sglang_plugin")



def _moe_ops() -> str:
    """The ops the MoE layers run (the specs': `OpSpec.sglang`)."""
    from ...ops.spec import served_by  # function-level: the specs import every op family

    return ", ".join(served_by("MoE layers"))
_SUPPORTED_RUNNER_BACKENDS = ("auto", "triton")


def _native_routing_forced() -> bool:
    from sglang.srt.environ import envs

    return bool(envs.SGLANG_SIMULATE_UNIFORM_EXPERTS.get() or envs.SGLANG_SIMULATE_ROUND_ROBIN_EXPERTS.get())


def _topk_forward(self, hidden_states, router_logits, *, num_token_non_padded=None,
                  expert_location_dispatch_info=None, dynamic_expert_bias=None, router_logits_partials=None):  # fmt: skip
    from kunlun_triton import ops
    from sglang.srt.eplb.expert_distribution import get_global_expert_distribution_recorder
    from sglang.srt.layers.moe.topk import (
        StandardTopKOutput,
        TopKOutputFormat,
        capture_routed_experts_if_allowed,
    )

    cfg = self.topk_config
    padded, placement = self._resolve_routing_inputs(num_token_non_padded, expert_location_dispatch_info)
    grouped = bool(cfg.use_grouped_topk)
    if (
        placement is not None
        or dynamic_expert_bias is not None
        or router_logits_partials is not None
        or cfg.custom_routing_function is not None
        or cfg.num_shared_topk_slots
        or cfg.scoring_func not in ("softmax", "sigmoid")
        or cfg.sqrtsoftplus_log1p
        or cfg.output_format not in (None, TopKOutputFormat.STANDARD)
        # with a bias SGLang's grouped top-k scores by sigmoid whatever scoring_func says
        or (grouped and cfg.correction_bias is not None and cfg.scoring_func != "sigmoid")
        or router_logits.dim() != 2
        or router_logits.shape[0] == 0
        or _native_routing_forced()
    ):
        return self.forward_native(
            hidden_states, router_logits, num_token_non_padded=num_token_non_padded,
            expert_location_dispatch_info=expert_location_dispatch_info, dynamic_expert_bias=dynamic_expert_bias,
            router_logits_partials=router_logits_partials,
        )  # fmt: skip
    scaling = cfg.routed_scaling_factor if cfg.apply_routed_scaling_factor_on_output else None
    weights, ids = ops.moe_topk(
        router_logits, cfg.top_k, renormalize=cfg.renormalize, scoring=cfg.scoring_func,
        correction_bias=cfg.correction_bias, num_expert_group=cfg.num_expert_group if grouped else None,
        topk_group=cfg.topk_group if grouped else None, routed_scaling_factor=scaling,
        check=dev_mode() and not dp_gathered(),  # DP attention's pad rows are uninitialised by design
    )  # fmt: skip
    if padded is not None:  # SGLang bounds the real rows under EP: -1 drops the padding (select_experts' CPU path)
        ids.masked_fill_((torch.arange(ids.shape[0], device=ids.device) >= padded)[:, None], -1)
    # What select_experts does after routing when no expert placement is in play.
    capture_routed_experts_if_allowed(cfg, self.layer_id, ids)
    get_global_expert_distribution_recorder().on_select_experts(topk_ids=ids)
    return self._apply_waterfill(StandardTopKOutput(weights, ids, router_logits), hidden_states.shape[0])


def ids_may_be_invalid(layer) -> bool:
    """Expert ids outside the layer's local experts may reach fused_experts:
    EP's -1 for other ranks' experts, and ids routed from DP attention's pad rows."""
    return layer.moe_ep_size > 1 or dp_gathered()


def _ours_can_run(self, layer, dispatch_output, int8: bool) -> bool:
    """Whether fused_experts computes what this MoE layer's call asks (else
    the caller falls back): standard top-k output, a gated silu/gelu (with
    gpt-oss's biases and clamped SwiGLU, or without), x's dtype matching the
    experts' (int8 experts: a float x, SGLang's W8A8-INT8)."""
    from sglang.srt.layers.moe.topk import TopKOutputChecker

    cfg = self.moe_runner_config
    x = dispatch_output.hidden_states
    dtype_ok = x.dtype.is_floating_point if int8 else x.dtype == layer.w13_weight.dtype
    return not (
        not TopKOutputChecker.format_is_standard(dispatch_output.topk_output)
        or cfg.activation not in ("silu", "gelu", "gelu_tanh")
        or not cfg.is_gated
        or cfg.no_combine
        or (cfg.gemm1_alpha is not None) != (cfg.gemm1_clamp_limit is not None)  # SwiGLU-OAI: both
        or (cfg.gemm1_alpha is not None and cfg.activation != "silu")
        or cfg.swiglu_limit is not None
        or getattr(self, "w13_swiglu_interleaved", False)
        or x.dim() != 2
        or not dtype_ok
    )


def _run_fused_experts(self, layer, dispatch_output, **quant):
    from kunlun_triton import ops
    from sglang.srt.layers.moe.token_dispatcher import StandardCombineInput
    from sglang.srt.utils import is_cuda

    cfg = self.moe_runner_config
    topk_output = dispatch_output.topk_output
    out = ops.fused_experts(
        dispatch_output.hidden_states, layer.w13_weight, layer.w2_weight, topk_output.topk_weights,
        topk_output.topk_ids, activation=cfg.activation,
        apply_router_weight_on_input=bool(cfg.apply_router_weight_on_input),
        out=dispatch_output.hidden_states if cfg.inplace else None,  # as SGLang's Triton runner
        check=dev_mode(), ids_may_be_invalid=ids_may_be_invalid(layer), b1=getattr(layer, "w13_weight_bias", None),
        b2=getattr(layer, "w2_weight_bias", None), gemm1_alpha=cfg.gemm1_alpha, gemm1_limit=cfg.gemm1_clamp_limit,
        **quant,
    )  # fmt: skip
    scale = cfg.routed_scaling_factor
    if is_cuda() and scale not in (None, 1.0) and not layer.should_fuse_routed_scaling_factor_in_topk:
        out.mul_(scale)  # the CUDA runner's job there (see the module doc)
    return StandardCombineInput(hidden_states=out)


def _experts_forward(self, layer, dispatch_output):
    if not _ours_can_run(self, layer, dispatch_output, int8=False):
        return self.forward_native(layer, dispatch_output)
    return _run_fused_experts(self, layer, dispatch_output)


def int8_experts_apply(original, self, layer, dispatch_output):
    """``W8A8Int8MoEMethod.apply`` (an AROUND hook, kunlun platform only):
    int8 experts with per-channel scales through fused_experts(use_int8_w8a8);
    SGLang's own path (its CUDA Triton runner) for what ours does not cover."""
    if use_intel_amx_or_arm(layer) or not _ours_can_run(self, layer, dispatch_output, int8=True) \
            or getattr(layer, "w13_input_scale", None) is not None:  # fmt: skip
        return original(self, layer, dispatch_output)
    return _run_fused_experts(self, layer, dispatch_output, use_int8_w8a8=True, w13_scale=layer.w13_weight_scale,
                              w2_scale=layer.w2_weight_scale)  # fmt: skip


def use_intel_amx_or_arm(layer) -> bool:
    """SGLang's CPU engine paths (AMX / arm64 sgl_kernel ops) stay SGLang's."""
    from sglang.srt.layers.quantization import w8a8_int8

    return bool(w8a8_int8.use_intel_amx_backend(layer) or w8a8_int8._is_cpu_arm64)


def register_moe_ops(dispatch_key: str) -> dict[type, str]:
    """Register the router and experts forwards under `dispatch_key` (the
    install table does, once); returns {class: op name}."""
    from sglang.kernels.fused_op import BaseFusedOp
    from sglang.srt.layers.moe.topk import TopK
    from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod

    from ...ops import fused_experts, moe_topk

    table = {TopK: (_topk_forward, moe_topk), UnquantizedFusedMoEMethod: (_experts_forward, fused_experts)}
    for cls, (fn, _) in table.items():
        BaseFusedOp.register_oot_forward(cls, fn, dispatch_key)
    return {cls: op.__name__ for cls, (_, op) in table.items()}


class UnsupportedMoE(ValueError):
    """An MoE configuration that cannot run on our target."""


def check_server_args(server_args) -> None:
    """Refuse, at start, MoE settings whose SGLang paths need CUDA-only kernels."""
    a2a = getattr(server_args, "moe_a2a_backend", "none") or "none"
    if a2a != "none":
        raise UnsupportedMoE(
            f"kunlun-triton: --moe-a2a-backend {a2a} is not supported on the kunlun platform (its all-to-all "
            "kernels are CUDA or ROCm libraries); leave --moe-a2a-backend at 'none': --ep-size then runs "
            "SGLang's standard dispatcher on kunlun-triton's ops and communicator."
        )
    runner = getattr(server_args, "moe_runner_backend", "auto") or "auto"
    if runner not in _SUPPORTED_RUNNER_BACKENDS:
        raise UnsupportedMoE(
            f"kunlun-triton: --moe-runner-backend {runner} is not supported on the kunlun platform; its MoE "
            f"layers run kunlun-triton's {_moe_ops()} (--moe-runner-backend auto or triton)."
        )


def check_model(model) -> int:
    """Refuse a loaded model with an MoE layer our ops cannot run (quantized
    experts); returns the number of MoE layers found. Expert-parallel layers
    run (each rank's local experts, see the module doc)."""
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
    from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod

    from kunlun_triton.runtime import current_target

    from sglang.srt.layers.quantization.w8a8_int8 import W8A8Int8MoEMethod

    from .mxfp4 import method_class

    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, FusedMoE)]
    for name, layer in layers:
        method = type(layer.quant_method)
        if method not in (UnquantizedFusedMoEMethod, W8A8Int8MoEMethod, method_class()):
            raise UnsupportedMoE(
                f"kunlun-triton: MoE layer {name} uses {method.__name__} (a quantized or wrapped expert method); "
                f"on target {current_target().name} only unquantized, W8A8-INT8 and MXFP4 experts run "
                f"(kunlun-triton's {_moe_ops()}). SGLang's other quantized MoE kernels are CUDA-only: serve the "
                "unquantized, a w8a8_int8 or an MXFP4 checkpoint."
            )
    if layers:
        logger.debug("kunlun-triton: %d MoE layers run %s", len(layers), _moe_ops())
    return len(layers)
