"""Every attention kernel lowers ahead of time as the launchers plan it
(`OpSpec.kernels`) for CUDA sm_90, HIP gfx942 and Kunlun (its plans compiled
for sm_90 as a proxy), both formulations, several head dims, fp16 and bf16,
with a sliding window and a logit cap, extend in its unified (deterministic)
mode too; and the tiles `kunlun-p800.yaml`
ships compile without spills."""

import dataclasses

import pytest
import torch

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.sass import kernel_cost
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.runtime import get_config
from kunlun_triton.testing import LOWERING_TARGETS, aot_target, assert_lowers

# Run again in the sglang stage, on the Triton SGLang brings (scripts/test.sh).
pytestmark = pytest.mark.lowering

KUNLUN = next(t for t in LOWERING_TARGETS if t.name == "kunlun")


def _shapes(head_dim, q_heads=8, kv_heads=2):
    heads = {"q_heads": q_heads, "kv_heads": kv_heads, "head_dim": head_dim}
    return {
        "store_kv": {"tokens": 7, "kv_heads": kv_heads, "head_dim": head_dim},
        "decode_attention": {"batch": 3, "context_len": 100, **heads},
        "extend_attention": {"batch": 2, "prefix_len": 40, "extend_len": 30, **heads},
    }


def _config(target, op, shape, formulation):
    if op == "store_kv":
        return None
    config = get_config(op, target=target, head_dim=shape["head_dim"], group=shape["q_heads"] // shape["kv_heads"])
    if formulation == "sum" and config.get("formulation") != "sum":
        config = {**config, "formulation": "sum", "BLOCK_M": 16, "BLOCK_N": 16}
    return config


def _windowed(spec):
    """The same launch with a sliding window and a logit cap, where the kernel takes them."""
    changes = {k: v for k, v in (("WINDOW", 16), ("LOGIT_CAP", 30.0)) if k in spec.constexprs}
    return dataclasses.replace(spec, constexprs={**spec.constexprs, **changes})


def _kv_indices_kernels(target):
    """build_kv_indices (a captured decode step's metadata) as `target` launches it."""
    from kunlun_triton.ops import build_kv_indices
    from kunlun_triton.runtime import targeting
    from kunlun_triton.introspect.launches import meta_kernel_specs

    def meta(*shape, dtype=torch.int32):
        return torch.empty(shape, dtype=dtype, device="meta")

    with targeting(target):
        return meta_kernel_specs(lambda: build_kv_indices(meta(8, 4096), meta(3, dtype=torch.int64),
                                                          meta(3, dtype=torch.int64), meta(4), meta(3 * 4096),
                                                          check=False))  # fmt: skip


def _unified(spec):
    return dataclasses.replace(spec, constexprs={**spec.constexprs, "UNIFIED": True})


def test_attention_kernels_lower():
    jobs = []
    for target in LOWERING_TARGETS:
        cases = [(torch.float16, 128, "dot"), (torch.bfloat16, 80, "sum"), (torch.float16, 13, "dot")]
        if target.name != "cuda":
            cases = [(torch.float16, 128, "dot" if target.name == "hip" else "sum")]
        for dtype, head_dim, formulation in cases:
            for op, shape in _shapes(head_dim).items():
                planned = planned_kernels(op, shape, dtype, target, _config(target, op, shape, formulation))
                if head_dim == 80:
                    planned = [_windowed(spec) for spec in planned]
                jobs += [(spec, aot_target(target)) for spec in planned]
                if op == "extend_attention" and head_dim != 13:  # deterministic inference's unified mode too
                    jobs += [(_unified(spec), aot_target(target)) for spec in planned]
        jobs += [(spec, aot_target(target)) for spec in _kv_indices_kernels(target)]
    assert {spec.name for spec, _ in jobs} == {"store_kv_kernel", "decode_partial_kernel", "decode_merge_kernel",
                                                "extend_kernel", "build_kv_indices_kernel"}  # fmt: skip
    assert_lowers(jobs)


def test_kunlun_tiles_do_not_spill_on_sm90():
    """kunlun-p800.yaml's attention tiles (tl.sum formulation) compiled for
    sm_90 keep everything in registers: the [rows, head_dim, keys] broadcast
    product of the sum formulation is what could spill."""
    specs = []
    for op, shape in _shapes(128, q_heads=32, kv_heads=8).items():
        planned = planned_kernels(op, shape, torch.float16, KUNLUN)
        if op != "store_kv":
            assert all(spec.constexprs.get("USE_DOT") in (None, False) for spec in planned)
        specs += planned
    for result in compile_ahead_of_time(specs, targets=("cuda",), artifacts=True):
        assert result["ok"], result.get("error")
        cost = kernel_cost(result)
        assert cost["spill_bytes"] == 0, f"{result['spec'].label}: {cost}"
