"""SGLang 0.5.23's own MoE kernels, run on our ops' inputs (bench) and as
ahead-of-time compile specs (``kunlun-triton inspect``, docs/moe.md's
register/spill table).

- routing: ``fused_topk`` (its CUDA JIT router), or the grouped
  ``grouped_topk`` / ``biased_grouped_topk``;
- experts: ``fused_experts_impl``, its Triton path: ``moe_align_block_size``
  (a CUDA JIT kernel: on CPU the bench row says so), ``fused_moe_kernel`` for
  W13 into a [T*K, 2I] cache, ``silu_and_mul``, ``fused_moe_kernel`` for W2
  with the routed weight, then the K-sum.

Importing this module imports sglang (ImportError when absent). Compile
the specs in a process without ``SGLANG_PLATFORM=kunlun``: our platform's
development mode sets ``TRITON_INTERPRET=1`` as SGLang loads, which turns
SGLang's kernels into interpreted functions.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.moe import topk as sglang_topk
from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe import fused_experts_impl

from kunlun_triton.introspect.aot import KernelSpec

FUSED_MOE_KERNEL = "sglang.kernels.ops.moe.fused_moe_triton_kernels:fused_moe_kernel"
_TRITON_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def sglang_moe_topk(logits, top_k, *, renormalize=True, scoring="softmax", correction_bias=None,
                    num_expert_group=None, topk_group=None, routed_scaling_factor=None):  # fmt: skip
    """(topk_weights, topk_ids) from SGLang's router for our op's arguments."""
    scaled = routed_scaling_factor is not None
    if num_expert_group and correction_bias is not None:
        return sglang_topk.biased_grouped_topk(logits, logits, correction_bias, top_k, renormalize, num_expert_group,
                                               topk_group, routed_scaling_factor=routed_scaling_factor,
                                               apply_routed_scaling_factor_on_output=scaled)  # fmt: skip
    if num_expert_group:
        return sglang_topk.grouped_topk(logits, logits, top_k, renormalize, num_expert_group, topk_group,
                                        routed_scaling_factor=routed_scaling_factor,
                                        apply_routed_scaling_factor_on_output=scaled, scoring_func=scoring)  # fmt: skip
    return sglang_topk.fused_topk(logits, logits, top_k, renormalize, correction_bias=correction_bias,
                                  scoring_func=scoring, routed_scaling_factor=routed_scaling_factor,
                                  apply_routed_scaling_factor_on_output=scaled)  # fmt: skip


def moe_topk_baseline(case):
    """SGLang's router on a `moe_topk` bench case."""
    logits, top_k, kwargs = case.args
    return lambda: sglang_moe_topk(logits, top_k, **kwargs)


def fused_experts_baseline(case):
    """SGLang's Triton fused_experts on a `fused_experts` bench case (its own output)."""
    x, w13, w2, topk_weights, topk_ids = case.args
    return lambda: fused_experts_impl(x, w13, w2, topk_weights, topk_ids, inplace=False, filter_expert=False)


def fused_moe_kernel_spec(dtype: torch.dtype, *, block_m: int, block_n: int, block_k: int, top_k: int,
                          mul_routed_weight: bool, even_k: bool = True, group_size_m: int = 1,
                          ints: dict | None = None, options: dict | None = None,
                          int8: bool = False) -> KernelSpec:  # fmt: skip
    """SGLang's ``fused_moe_kernel`` as ``invoke_fused_moe_kernel`` launches it
    for unquantized weights (no TMA, no bias, no fused epilogues), at the given
    block sizes: W13 with ``block_n`` = 2 x our BLOCK_N covers what one of our
    gate/up programs does per K step; W2 with ``mul_routed_weight``. The unit
    strides (A, B along K and C along N) are specialised to 1, as a launch does;
    pointers are 16-byte aligned and the integer arguments in `ints` (their
    values at a shape) divisible by 16 are marked so, as Triton's launcher
    specialises them; `options`: num_warps / num_stages. `int8`: its
    ``use_int8_w8a8`` + ``per_channel_quant`` launch (int8 A and B, A's
    per-token scales [M, 1], B's per-channel [E, N, 1])."""
    t = _TRITON_DTYPES[dtype]
    scales = ("a_scale_ptr", "b_scale_ptr")
    none = ("a_desc", "b_desc", "bias_ptr", "add_mask_ptr") + (() if int8 else scales)
    one = ("stride_ak", "stride_bk", "stride_cn") + (("stride_asm", "stride_ask", "stride_bsk", "stride_bsn") if int8
                                                     else ())  # fmt: skip
    zero = ("stride_bias_e", "stride_bias_n") + (() if int8 else ("stride_asm", "stride_ask", "stride_bse",
                                                                  "stride_bsk", "stride_bsn"))  # fmt: skip
    constexprs = {
        **{n: None for n in none}, **{n: 1 for n in one}, **{n: 0 for n in zero},
        "group_n": 0, "group_k": 0, "BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": block_n, "BLOCK_SIZE_K": block_k,
        "GROUP_SIZE_M": group_size_m, "MUL_ROUTED_WEIGHT": mul_routed_weight, "top_k": top_k,
        "compute_type": {"bf16": "tl.bfloat16", "fp16": "tl.float16", "fp32": "tl.float32"}[t],
        "use_fp8_w8a8": False, "use_int8_w8a8": int8, "use_int8_w8a16": False, "per_channel_quant": int8,
        "even_Ks": even_k, "c_sorted": False, "swap_ab": False, "FUSE_ADD_TO_OUTPUT": False, "MASK_OUTPUT": False,
        "FUSE_SUM_ALL_REDUCE": False, "ROUTER_TOPK": 1, "FUSE_SWIGLU": False, "USE_GDC": False, "GDC_EARLY": False,
        "A_OUTPUT_SLICES": 1, "A_OUTPUT_SLICE_WIDTH": 0, "A_OUTPUT_SLICE_K": 0,
    }  # fmt: skip
    signature = {
        "a_ptr": "*i8" if int8 else f"*{t}", "b_ptr": "*i8" if int8 else f"*{t}", "c_ptr": f"*{t}",
        **({"a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32"} if int8 else {}), "topk_weights_ptr": "*fp32",
        "sorted_token_ids_ptr": "*i32", "expert_ids_ptr": "*i32", "num_tokens_post_padded_ptr": "*i32",
        "N": "i32", "K": "i32", "EM": "i32", "num_valid_tokens": "i32",
        "stride_am": "i32", "stride_be": "i32", "stride_bn": "i32", "stride_cm": "i32",
        **({"stride_bse": "i32"} if int8 else {}),
    }  # fmt: skip
    signature.update({k: "constexpr" for k in constexprs})
    aligned = [name for name, kind in signature.items() if kind.startswith("*")]
    aligned += [name for name, value in (ints or {}).items() if value % 16 == 0]
    attrs = {name: [["tt.divisibility", 16]] for name in aligned}
    return KernelSpec(FUSED_MOE_KERNEL, signature, constexprs, dict(options or {}), attrs, loop_items=block_k)


def fused_experts_kernel_baselines(shape: dict, dtype: torch.dtype, config: dict | None = None) -> dict:
    """``{our kernel: SGLang's}`` for a `fused_experts` shape: SGLang's
    ``fused_moe_kernel`` at the block sizes our W13 and W2 kernels use there
    (from the op spec's ``kernels``, the same code as the launcher)."""
    from kunlun_triton.ops.moe.spec import fused_experts_kernels

    ours = {k.kernel.split(":")[1]: k for k in fused_experts_kernels(shape, dtype, config)}
    up_spec, down_spec = ours["moe_gate_up_kernel"], ours["moe_down_kernel"]
    up, down = up_spec.constexprs, down_spec.constexprs
    tokens, experts, top_k = shape["tokens"], shape["num_experts"], shape["top_k"]
    hidden, inter = shape["hidden_size"], shape["intermediate_size"]
    # SGLang's moe_align_block_size pads the sorted ids to T K + E (BLOCK_M - 1) rows (EM)
    em = lambda block_m: tokens * top_k + experts * (block_m - 1)  # noqa: E731
    up_ints = {"N": 2 * inter, "K": hidden, "EM": em(up["BLOCK_M"]), "num_valid_tokens": tokens * top_k,
               "stride_am": hidden, "stride_be": 2 * inter * hidden, "stride_bn": hidden, "stride_cm": 2 * inter}
    down_ints = {"N": hidden, "K": inter, "EM": em(down["BLOCK_M"]), "num_valid_tokens": tokens * top_k,
                 "stride_am": inter, "stride_be": hidden * inter, "stride_bn": inter, "stride_cm": hidden}
    return {
        "moe_gate_up_kernel": fused_moe_kernel_spec(
            dtype, block_m=up["BLOCK_M"], block_n=2 * up["BLOCK_N"], block_k=up["BLOCK_K"], top_k=top_k,
            mul_routed_weight=False, even_k=hidden % up["BLOCK_K"] == 0, ints=up_ints, options=up_spec.options),
        "moe_down_kernel": fused_moe_kernel_spec(
            dtype, block_m=down["BLOCK_M"], block_n=down["BLOCK_N"], block_k=down["BLOCK_K"], top_k=1,
            mul_routed_weight=True, even_k=inter % down["BLOCK_K"] == 0, ints=down_ints,
            options=down_spec.options),
    }  # fmt: skip


# The device SGLang's config files name for an inspect target (its
# ``get_device_name()`` on that card, spaces as underscores in the file name).
DEVICE_NAMES = {"sm_90": "NVIDIA H200", "sm_80": "NVIDIA A100-SXM4-80GB", "gfx942": "AMD Instinct MI300X"}


def sglang_moe_configs(shape: dict, target=None) -> tuple[dict, dict]:
    """(W13 config, W2 config) SGLang's fused-MoE runner picks for `shape`
    on `target`'s device (default: the active target): its shipped tuned file
    for (E, N = intermediate size, device), the entry nearest the token
    count, as `try_get_optimal_moe_config` does (W2 from the ``_down`` file,
    else W13's), else its default config. Its own lookup code, with the
    device name and its runtime config namespace stood in."""
    from types import SimpleNamespace
    from unittest import mock

    import sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config as moe_config
    from kunlun_triton.runtime import current_target

    target = target or current_target()
    tokens, experts, inter = shape["tokens"], shape["num_experts"], shape["intermediate_size"]
    not_deterministic = SimpleNamespace(deterministic=SimpleNamespace(enable_deterministic_inference=False))
    name = DEVICE_NAMES.get(target.arch, DEVICE_NAMES["sm_90"])
    with mock.patch.object(moe_config, "get_device_name", lambda *a, **k: name), \
            mock.patch.object(moe_config, "get_exec", lambda: not_deterministic):  # fmt: skip
        lookup = moe_config.get_moe_configs.__wrapped__  # uncached: the device name is ours
        up_table, down_table = lookup(experts, inter, None), lookup(experts, inter, None, down_moe=True)
        nearest = lambda table: dict(table[min(table, key=lambda m: abs(m - tokens))]) if table else None  # noqa: E731
        up = nearest(up_table) or moe_config.get_default_config(tokens, experts, inter, shape["hidden_size"],
                                                                 shape["top_k"], None, False, None)  # fmt: skip
    down = nearest(down_table) or dict(up)
    down["BLOCK_SIZE_M"] = up["BLOCK_SIZE_M"]  # one alignment sort serves both (its runner's rule)
    return up, down


def fused_experts_inspect_specs(shape: dict, dtype: torch.dtype) -> list[KernelSpec]:
    """`inspect --compare sglang`: SGLang's W13 and W2 ``fused_moe_kernel`` as
    its runner launches them on the active target's device: tiles, group and
    num_warps / num_stages from its shipped tuned config file
    (`sglang_moe_configs`; its alignment is a CUDA JIT kernel and its K-sum
    torch: nothing to compile)."""
    tokens, experts, top_k = shape["tokens"], shape["num_experts"], shape["top_k"]
    hidden, inter = shape["hidden_size"], shape["intermediate_size"]
    up, down = sglang_moe_configs(shape)
    em = lambda block_m: tokens * top_k + experts * (block_m - 1)  # noqa: E731  (moe_align_block_size's padding)
    up_ints = {"N": 2 * inter, "K": hidden, "EM": em(up["BLOCK_SIZE_M"]), "num_valid_tokens": tokens * top_k,
               "stride_am": hidden, "stride_be": 2 * inter * hidden, "stride_bn": hidden, "stride_cm": 2 * inter}
    down_ints = {"N": hidden, "K": inter, "EM": em(down["BLOCK_SIZE_M"]), "num_valid_tokens": tokens * top_k,
                 "stride_am": inter, "stride_be": hidden * inter, "stride_bn": inter, "stride_cm": hidden}
    options = lambda c: {k: c[k] for k in ("num_warps", "num_stages") if k in c}  # noqa: E731
    return [
        fused_moe_kernel_spec(dtype, block_m=up["BLOCK_SIZE_M"], block_n=up["BLOCK_SIZE_N"], block_k=up["BLOCK_SIZE_K"],
                              top_k=top_k, mul_routed_weight=False, even_k=hidden % up["BLOCK_SIZE_K"] == 0,
                              group_size_m=up.get("GROUP_SIZE_M", 1), ints=up_ints, options=options(up)),
        fused_moe_kernel_spec(dtype, block_m=down["BLOCK_SIZE_M"], block_n=down["BLOCK_SIZE_N"],
                              block_k=down["BLOCK_SIZE_K"], top_k=1, mul_routed_weight=True,
                              even_k=inter % down["BLOCK_SIZE_K"] == 0, group_size_m=down.get("GROUP_SIZE_M", 1),
                              ints=down_ints, options=options(down)),
    ]  # fmt: skip


def int8_scaled_mm_inspect_specs(shape: dict, dtype: torch.dtype) -> list[KernelSpec]:
    """`inspect --compare sglang` for int8_scaled_mm: SGLang's int8 Triton GEMM,
    ``fused_moe_kernel`` with ``use_int8_w8a8`` and per-channel scales (one
    expert, top_k 1: an [M, K] x [K, N] product), at our kernel's tiles and
    launch options (SGLang's dense W8A8 GEMM is sgl_kernel's CUDA
    ``int8_scaled_mm``: nothing to compile)."""
    from kunlun_triton.ops.quant.spec import mm_kernels

    (ours,) = mm_kernels(shape, dtype, None)
    c = ours.constexprs
    m, n, k = shape["m"], shape["n"], shape["k"]
    em = -(-m // c["BLOCK_M"]) * c["BLOCK_M"]
    ints = {"N": n, "K": k, "EM": em, "num_valid_tokens": m, "stride_am": k, "stride_be": n * k, "stride_bn": k,
            "stride_cm": n, "stride_bse": n}  # fmt: skip
    return [fused_moe_kernel_spec(dtype, block_m=c["BLOCK_M"], block_n=c["BLOCK_N"], block_k=c["BLOCK_K"], top_k=1,
                                  mul_routed_weight=False, even_k=k % c["BLOCK_K"] == 0, ints=ints,
                                  options=ours.options, int8=True)]  # fmt: skip
