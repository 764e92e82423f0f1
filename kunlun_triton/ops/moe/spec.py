"""Specs of the MoE ops for doctor, bench, tune and the lowering tests (see `ops.spec`).

Bench shapes are the issue's models: Qwen3-30B-A3B (E=128, K=8, H=2048,
I=768) and Mixtral-8x7B (E=8, K=2, H=4096, I=14336), at decode (T = 1..64)
and prefill (T = 1024, 4096) token counts; a preset with experts
(``--preset qwen3-30b-a3b``) benchmarks that model alone. The routing of a
fused_experts case comes from the torch reference router on seeded logits,
so every expert count is realistic (and the case never depends on the
kernel under test). Bytes moved: x and the output once, and each expert
that receives a token read once (decode is bound by those weights); flops:
6 T K H I (three GEMMs of T K rows).
"""

from __future__ import annotations

import torch

from ...runtime import Target, get_config
from ...runtime.capabilities import AOT_PROXY, default_target, planning_target
from ...introspect.aot import KernelSpec
from ..spec import FORMULATION, TILE, OpCase, OpSpec, baselines
from . import reference
from .experts_checks import FORMULATIONS
from .experts_plan import SUM_TILE_CAP
from .fused_experts import fused_experts
from .moe_topk import _plan as topk_plan
from .moe_topk import moe_topk

# (num_experts, top_k, hidden_size, moe intermediate size); DeepSeek-V3 for routing only
MOE_MODELS = {
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "mixtral-8x7b": (8, 2, 4096, 14336),
}
GROUPED_ROUTING = {"model": "deepseek-v3", "num_experts": 256, "top_k": 8, "scoring": "sigmoid", "bias": True,
                   "groups": 8, "topk_group": 4, "scaling": 2.5}  # fmt: skip
DECODE_TOKENS = (1, 16, 64)
PREFILL_TOKENS = (1024, 4096)
# The AOT targets' capabilities (tl.dot everywhere, bf16 dot right, other= honoured).
GPU = default_target(AOT_PROXY, "ahead-of-time compile")  # the AOT proxy's default part (sm_90)
TRITON_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _elt(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _models(preset) -> list[tuple[str, tuple]]:
    experts = getattr(preset, "num_experts", 0)
    if experts:
        return [(preset.name, (experts, preset.num_experts_per_tok, preset.hidden_size, preset.moe_intermediate_size))]
    return list(MOE_MODELS.items())


# ---------------------------------------------------------------- moe_topk


def _routing_kwargs(shape, device):
    experts = shape["num_experts"]
    kwargs = {"scoring": shape.get("scoring", "softmax"), "renormalize": shape.get("renormalize", True)}
    if shape.get("bias"):
        gen = torch.Generator().manual_seed(experts)
        kwargs["correction_bias"] = (torch.rand(experts, generator=gen) * 0.1).to(device)
    if shape.get("groups"):
        kwargs.update(num_expert_group=shape["groups"], topk_group=shape["topk_group"])
    if shape.get("scaling"):
        kwargs["routed_scaling_factor"] = shape["scaling"]
    return kwargs


def _logits(shape, dtype, device):
    gen = torch.Generator().manual_seed(shape["tokens"] * 31 + shape["num_experts"])
    return torch.randn(shape["tokens"], shape["num_experts"], generator=gen).to(dtype).to(device)


def moe_topk_case(shape, dtype, device) -> OpCase:
    logits, kwargs, top_k = _logits(shape, dtype, device), _routing_kwargs(shape, device), shape["top_k"]
    return OpCase(
        run=lambda config: moe_topk(logits, top_k, check=False, config=config, **kwargs),
        reference=lambda: reference.moe_topk(logits, top_k, **kwargs),
        dims={"num_experts": shape["num_experts"]},
        bytes_moved=logits.numel() * _elt(dtype) + shape["tokens"] * top_k * 8,
        args=(logits, top_k, kwargs),  # (kwargs last: the routing options, for SGLang's router)
    )


def moe_topk_shapes(preset, quick):
    if quick:
        return [{"model": "tiny", "tokens": 8, "num_experts": 16, "top_k": 4}, {**GROUPED_ROUTING, "tokens": 8}]
    shapes = [{"model": name, "tokens": t, "num_experts": e, "top_k": k}
              for name, (e, k, _, _) in _models(preset) for t in (1, 64, 4096)]  # fmt: skip
    return shapes + [{**GROUPED_ROUTING, "tokens": t} for t in (1, 64, 4096)]


def moe_topk_candidates(quick):
    return [{"ROWS_PER_PROGRAM": r} for r in ((1, 8) if quick else (1, 2, 4, 8, 16, 32))]


def moe_topk_kernels(shape, dtype, config) -> list[KernelSpec]:
    """The router kernel at `shape` with `config` (None: the sm_90 file's)."""
    if config is None:
        config = get_config("moe_topk", target=GPU, num_experts=shape["num_experts"])
    kwargs = _routing_kwargs(shape, "cpu")
    _, _, constexprs, _ = topk_plan.uncached(
        shape["num_experts"], shape["top_k"], kwargs["scoring"], "correction_bias" in kwargs,
        shape.get("groups") or None, shape.get("topk_group") or None, "routed_scaling_factor" in kwargs,
        bool(kwargs["renormalize"]), config)  # fmt: skip
    signature = {"logits_ptr": f"*{TRITON_DTYPES[dtype]}", "bias_ptr": "*fp32", "weights_ptr": "*fp32",
                 "ids_ptr": "*i32", "n_tokens": "i32", "logits_stride": "i32", "scaling": "fp32",
                 **{k: "constexpr" for k in constexprs}}  # fmt: skip
    return [KernelSpec("kunlun_triton.ops.moe.moe_topk:moe_topk_kernel", signature, constexprs)]


# ---------------------------------------------------------------- fused_experts


def _expert_weights(shape, dtype, device):
    experts, hidden, inter = shape["num_experts"], shape["hidden_size"], shape["intermediate_size"]
    gen = torch.Generator().manual_seed(experts * 7 + hidden + inter)
    # ~unit-variance activations through both GEMMs
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, generator=gen) / inter**0.5
    return w13.to(dtype).to(device), w2.to(dtype).to(device)


def _token_bucket(tokens: int) -> int:
    return 1 << max(tokens - 1, 0).bit_length()


def fused_experts_case(shape, dtype, device) -> OpCase:
    tokens, experts, top_k = shape["tokens"], shape["num_experts"], shape["top_k"]
    hidden, inter = shape["hidden_size"], shape["intermediate_size"]
    gen = torch.Generator().manual_seed(tokens * 131 + experts)
    x = torch.randn(tokens, hidden, generator=gen).to(dtype).to(device)
    w13, w2 = _expert_weights(shape, dtype, device)
    logits = torch.randn(tokens, experts, generator=gen).to(device)
    topk_weights, topk_ids = reference.moe_topk(logits, top_k)
    activation = shape.get("activation", "silu")
    active = int(torch.unique(topk_ids).numel())
    args = (x, w13, w2, topk_weights, topk_ids)
    work = x.clone()  # SGLang's call writes the output over its input (its runner's ``inplace``)
    return OpCase(
        run=lambda config: fused_experts(*args, activation=activation, check=False, config=config),
        reference=lambda: reference.fused_experts(*args, activation=activation),
        dims={"tokens": _token_bucket(tokens), "num_experts": experts, "top_k": top_k, "hidden_size": hidden,
              "intermediate_size": inter},  # fmt: skip
        bytes_moved=(2 * tokens * hidden + active * 3 * hidden * inter) * _elt(dtype) + tokens * top_k * 8,
        flops=6 * tokens * top_k * hidden * inter,
        args=args,
        time_reference=tokens * top_k <= 65536,
        call=lambda: fused_experts(work, *args[1:], activation=activation, check=False, out=work),
    )


def fused_experts_shapes(preset, quick):
    if quick:
        return [{"model": "tiny", "tokens": t, "num_experts": 8, "top_k": 2, "hidden_size": 64,
                 "intermediate_size": 48} for t in (1, 40)]  # fmt: skip
    return [{"model": name, "tokens": t, "num_experts": e, "top_k": k, "hidden_size": h, "intermediate_size": i}
            for name, (e, k, h, i) in _models(preset) for t in DECODE_TOKENS + PREFILL_TOKENS]  # fmt: skip


def fused_experts_tune_shapes(preset, quick):
    if quick:
        return fused_experts_shapes(preset, quick)[1:]
    return [s for s in fused_experts_shapes(preset, quick) if s["tokens"] in (16, 4096)]


def fused_experts_candidates(quick):
    if quick:
        tiles = ({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32}, {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 64})
    else:
        tiles = tuple({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "DOWN_BLOCK_N": 2 * n}
                      for m, n, k in ((16, 32, 128), (16, 64, 64), (32, 64, 64), (64, 64, 64), (64, 128, 64),
                                      (128, 64, 64), (128, 128, 64), (128, 128, 32)))  # fmt: skip
    from ... import runtime  # looked up per call: tune's tests swap the capabilities

    if not runtime.capabilities().has_dot:
        return list(tiles)  # the target's file picks sum
    return [{**t, "formulation": f} for t in tiles for f in FORMULATIONS]


def fused_experts_keep(candidate, shape) -> bool:
    from ... import runtime

    default = "dot" if runtime.capabilities().has_dot else "sum"
    if candidate.get("formulation", default) == "dot":
        return True
    # the sum formulation holds a [M, K, N] product per step
    return candidate["BLOCK_M"] * candidate["BLOCK_K"] * candidate["BLOCK_N"] <= SUM_TILE_CAP


def _compile_target() -> Target:
    """The active target where it compiles (cuda, hip, kunlun), else the GPU
    (the lowering tests plan under the interpreter, whose kernels never compile)."""
    return planning_target()


def fused_experts_kernels(shape, dtype, config) -> list[KernelSpec]:
    """The kernels fused_experts launches at `shape`, recorded from the
    launcher itself on meta tensors (constexprs, launch options and the
    16-divisibility a real launch specialises on) as the active compile
    target would launch them (the GPU's under the interpreter); `config`
    None: that target's file."""
    from ...introspect.launches import kernel_specs, with_loop_items

    tokens, experts, top_k = shape["tokens"], shape["num_experts"], shape["top_k"]
    hidden, inter = shape["hidden_size"], shape["intermediate_size"]
    meta = lambda *size, dtype=dtype: torch.empty(*size, dtype=dtype, device="meta")  # noqa: E731
    x = meta(tokens, hidden)
    weights, ids = meta(tokens, top_k, dtype=torch.float32), meta(tokens, top_k, dtype=torch.int32)
    if shape.get("mxfp4"):  # gpt-oss's MXFP4 experts: packed nibbles and e8m0 scales
        w13, w2 = meta(experts, 2 * inter, hidden // 2, dtype=torch.uint8), meta(experts, hidden, inter // 2, dtype=torch.uint8)
        quant = dict(use_mxfp4_w4a16=True, w13_scale=meta(experts, 2 * inter, hidden // 32, dtype=torch.uint8),
                     w2_scale=meta(experts, hidden, inter // 32, dtype=torch.uint8))  # fmt: skip
    else:
        wdt = torch.int8 if shape.get("int8") else dtype  # "int8": SGLang's W8A8-INT8 experts
        w13, w2 = meta(experts, 2 * inter, hidden, dtype=wdt), meta(experts, hidden, inter, dtype=wdt)
        quant = dict(use_int8_w8a8=True, w13_scale=meta(experts, 2 * inter, 1, dtype=torch.float32),
                     w2_scale=meta(experts, hidden, 1, dtype=torch.float32)) if shape.get("int8") else {}  # fmt: skip
    if shape.get("gpt_oss"):  # biases, interleaved gate/up rows, clamped SwiGLU (SGLang's gemm1_* names)
        quant.update(b1=meta(experts, 2 * inter, dtype=torch.bfloat16), b2=meta(experts, hidden, dtype=torch.bfloat16),
                     gemm1_alpha=1.702, gemm1_limit=7.0)  # fmt: skip
    call = lambda: fused_experts(x, w13, w2, weights, ids, activation=shape.get("activation", "silu"),  # noqa: E731
                                 check=False, config=config, **quant)
    target = _compile_target()
    specs = kernel_specs(call, Target(target.name, target.arch, "meta", target.reason))
    # one main-loop iteration: a BLOCK_K step of the GEMMs
    return with_loop_items(specs, {"moe_gate_up_kernel": "BLOCK_K", "moe_down_kernel": "BLOCK_K"})


SPECS = [
    OpSpec("moe_topk", "moe", moe_topk_case,
           (({"tokens": 5, "num_experts": 12, "top_k": 3}, torch.float32),
            ({"tokens": 3, "num_experts": 16, "top_k": 4, "scoring": "sigmoid", "bias": True, "groups": 4,
              "topk_group": 2, "scaling": 2.5}, torch.bfloat16)),
           moe_topk_shapes, tune_candidates=moe_topk_candidates, x_axis="tokens", kernels=moe_topk_kernels,
           config_keys={"ROWS_PER_PROGRAM": TILE}, function=moe_topk, lookup_dims=("num_experts",),
           sglang=("MoE layers",), sglang_baselines=baselines("moe:moe_topk", "bench")),
    OpSpec("fused_experts", "moe", fused_experts_case,
           (({"tokens": 6, "num_experts": 6, "top_k": 2, "hidden_size": 40, "intermediate_size": 24}, torch.float16),),
           fused_experts_shapes, tune_candidates=fused_experts_candidates, tune_shapes=fused_experts_tune_shapes,
           tune_keep=fused_experts_keep, tolerance_scale=2, x_axis="tokens", kernels=fused_experts_kernels,
           config_keys={"formulation": FORMULATION, **dict.fromkeys(
               ("BLOCK_M", "BLOCK_N", "BLOCK_K", "DOWN_BLOCK_N", "DOWN_BLOCK_K", "ALIGN_TILE"), TILE)},
           function=fused_experts,
           lookup_dims=("tokens", "num_experts", "top_k", "hidden_size", "intermediate_size"),
           sglang=("MoE layers", "W8A8-INT8 quantization"),
           sglang_baselines=baselines("moe:fused_experts", "bench", "inspect")),
]  # fmt: skip
