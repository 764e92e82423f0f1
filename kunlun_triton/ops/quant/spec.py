"""Specs of the W8A8-INT8 ops for doctor, bench, tune, inspect and the
lowering tests (see `ops.spec`).

Bench shapes: a preset's linear layers (K = hidden size, N = intermediate
size) at decode and prefill token counts. Bytes: the int8 operands, the
scales and the output once; flops: 2 M N K.
"""

from __future__ import annotations

import torch

from ...runtime import Target
from ...runtime.capabilities import planning_target
from ..spec import FORMULATION, TILE, OpCase, OpSpec, baselines
from . import ops, reference



def _elt(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ---------------------------------------------------------------- per_token_quant_int8


def _activations(shape, dtype, device):
    gen = torch.Generator().manual_seed(shape["rows"] * 31 + shape["d"])
    x = 3 * torch.randn(shape["rows"], shape["d"], generator=gen)
    if shape["rows"] > 1:
        x[1] = 0  # an all-zero row: the absmax floor
    return x.to(dtype).to(device)


def quant_compare(out, ref, dtype) -> tuple[float, bool]:
    """q bitwise; the scales within 1 ulp of fp32 (relative 2**-23)."""
    (q, s), (rq, rs) = out, ref
    q_err = float((q.int() - rq.int()).abs().max()) if q.numel() else 0.0
    s_err = float(((s - rs).abs() / rs.abs()).max()) if s.numel() else 0.0
    return max(q_err, s_err), q_err == 0 and s_err <= 2.0**-23


def quant_case(shape, dtype, device) -> OpCase:
    x = _activations(shape, dtype, device)
    return OpCase(
        run=lambda config: ops.per_token_quant_int8(x, check=False, config=config),
        reference=lambda: reference.per_token_quant_int8(x),
        dims={"hidden_size": shape["d"], "rows": 1 << max(shape["rows"] - 1, 0).bit_length()},
        bytes_moved=x.numel() * (_elt(dtype) + 1) + shape["rows"] * 4,
        args=(x,),
    )


def quant_shapes(preset, quick):
    d = 96 if quick else preset.hidden_size
    return [{"rows": r, "d": d} for r in ((7,) if quick else (1, 64, 4096))]


def quant_candidates(quick):
    pairs = ((1, 1024), (4, 1024)) if quick else ((r, c) for r in (1, 2, 4, 8) for c in (1024, 2048, 4096, 8192))
    return [{"ROWS_PER_PROGRAM": r, "BLOCK_COLS": c} for r, c in pairs if r * c <= 16384]


def quant_kernels(shape, dtype, config):
    from ...introspect.launches import meta_kernel_specs

    x = torch.empty(shape["rows"], shape["d"], dtype=dtype, device="meta")
    return meta_kernel_specs(lambda: ops.per_token_quant_int8(x, config=config))


# ---------------------------------------------------------------- int8_scaled_mm


def mm_operands(shape, dtype, device, bias=False):
    """(a, b, scale_a, scale_b, bias): quantized the way serving quantizes them
    (a per token from random activations, b per output channel, SGLang's
    transposed [K, N] view of an [N, K] weight)."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    gen = torch.Generator().manual_seed(m * 131 + n * 7 + k)
    a, scale_a = reference.per_token_quant_int8(torch.randn(m, k, generator=gen))
    w = torch.randn(n, k, generator=gen) / k**0.5
    w_q, scale_b = reference.per_token_quant_int8(w)
    b = torch.randn(n, generator=gen).to(dtype).to(device) if bias else None
    return a.to(device), w_q.to(device).t(), scale_a.to(device), scale_b.to(device), b


def mm_case(shape, dtype, device) -> OpCase:
    a, b, sa, sb, bias = mm_operands(shape, dtype, device, shape.get("bias", False))
    m, n, k = shape["m"], shape["n"], shape["k"]
    return OpCase(
        run=lambda config: ops.int8_scaled_mm(a, b, sa, sb, dtype, bias, check=False, config=config),
        reference=lambda: reference.int8_scaled_mm(a, b, sa, sb, dtype, bias),
        dims={"m": 1 << max(m - 1, 0).bit_length(), "n": n, "k": k},
        bytes_moved=m * k + k * n + 4 * (m + n) + m * n * _elt(dtype),
        flops=2 * m * n * k,
        args=(a, b, sa, sb, dtype, bias),
        time_reference=m * n * k <= 1 << 30,
    )


def mm_shapes(preset, quick):
    if quick:
        return [{"m": m, "n": 48, "k": 80} for m in (1, 33)]
    return [{"m": m, "n": preset.intermediate_size, "k": preset.hidden_size} for m in (1, 64, 1024, 4096)]


def mm_candidates(quick):
    if quick:
        tiles = ((16, 32, 32), (32, 64, 64))
    else:
        tiles = ((16, 64, 128), (32, 64, 128), (64, 64, 64), (64, 128, 64), (128, 128, 64), (128, 256, 64),
                 (128, 128, 128))  # fmt: skip
    from ... import runtime

    tiles = [{"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k} for m, n, k in tiles]
    if not runtime.capabilities().has_dot:
        return tiles  # the target's file picks sum
    return [{**t, "formulation": f} for t in tiles for f in ops.FORMULATIONS]


def mm_keep(candidate, shape) -> bool:
    from ... import runtime

    default = "dot" if runtime.capabilities().has_dot else "sum"
    if candidate.get("formulation", default) == "sum":
        return candidate["BLOCK_M"] * candidate["BLOCK_K"] * candidate["BLOCK_N"] <= ops.SUM_TILE_CAP
    return True


def mm_kernels(shape, dtype, config):
    """int8_scaled_mm's kernel at `shape` as the active compile target (the
    GPU's under the interpreter, whose kernels never compile) launches it."""
    from ...introspect.launches import kernel_specs, with_loop_items

    target = planning_target()
    m, n, k = shape["m"], shape["n"], shape["k"]
    meta = lambda *size, dt=torch.int8: torch.empty(*size, dtype=dt, device="meta")  # noqa: E731
    a, b = meta(m, k), meta(n, k).t()
    sa, sb = meta(m, 1, dt=torch.float32), meta(n, 1, dt=torch.float32)
    bias = meta(n, dt=dtype) if shape.get("bias") else None
    call = lambda: ops.int8_scaled_mm(a, b, sa, sb, dtype, bias, check=False, config=config)  # noqa: E731
    specs = kernel_specs(call, Target(target.name, target.arch, "meta", target.reason))
    return with_loop_items(specs, {"scaled_mm_kernel": "BLOCK_K"})  # one main-loop iteration: a K step


SPECS = [
    OpSpec("per_token_quant_int8", "quant", quant_case,
           (({"rows": 5, "d": 96}, torch.bfloat16), ({"rows": 3, "d": 2500}, torch.float16)),
           quant_shapes, tune_candidates=quant_candidates, compare=quant_compare, x_axis="rows",
           kernels=quant_kernels, config_keys={"ROWS_PER_PROGRAM": TILE, "BLOCK_COLS": TILE},
           function=ops.per_token_quant_int8, lookup_dims=("hidden_size", "rows"), sglang=("W8A8-INT8 quantization",)),
    OpSpec("int8_scaled_mm", "quant", mm_case,
           (({"m": 5, "n": 40, "k": 72, "bias": True}, torch.bfloat16), ({"m": 1, "n": 24, "k": 40}, torch.float16)),
           mm_shapes, tune_candidates=mm_candidates, tune_keep=mm_keep, x_axis="m", kernels=mm_kernels,
           config_keys={"formulation": FORMULATION, "BLOCK_M": TILE, "BLOCK_N": TILE, "BLOCK_K": TILE},
           function=ops.int8_scaled_mm, lookup_dims=("m", "n", "k"), sglang=("W8A8-INT8 quantization",),
           sglang_baselines=baselines("moe:int8_scaled_mm", "inspect")),
]  # fmt: skip
