"""The fp8-KV variants of store_kv, decode and extend (KV_FORMAT 1 = e4m3fn,
2 = e5m2 through the integer codec; 3 / 4 the same bytes converted by the
target, where attention reads them on CUDA sm_89+) lower ahead of time as
each target's shipped config plans them (`OpSpec.kernels` with
``kv_dtype``: cuda sm_90, hip gfx942, Kunlun's plans compiled for sm_90 as a
proxy), MLA's split head dim included, without spills; and a model-dtype
pool plans KV_FORMAT 0 (the code it had before)."""

import pytest
import torch

from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.testing import LOWERING_TARGETS, aot_target
from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.sass import kernel_cost

KV_DTYPES = {"fp8_e4m3": 1, "fp8_e5m2": 2}


def _shapes(kv_dtype, head_dim=128, q_heads=32, kv_heads=8):
    heads = {"q_heads": q_heads, "kv_heads": kv_heads, "head_dim": head_dim, "kv_dtype": kv_dtype}
    return {
        "store_kv": {"tokens": 7, "kv_heads": kv_heads, "head_dim": head_dim, "kv_dtype": kv_dtype},
        "decode_attention": {"batch": 3, "context_len": 100, **heads},
        "extend_attention": {"batch": 2, "prefix_len": 40, "extend_len": 30, **heads},
    }


def _expected_format(kv_dtype, op, target) -> int:
    """The codec's format, or on sm_90 (fp8 conversions of its own) the
    target's conversion for the attention reads; store_kv encodes with the codec."""
    fmt = KV_DTYPES.get(kv_dtype, 0)
    return fmt + 2 if fmt and target.name == "cuda" and op != "store_kv" else fmt


def _jobs(kv_dtype, shapes):
    jobs = []
    for target in LOWERING_TARGETS:
        for op, shape in shapes.items():
            for spec in planned_kernels(op, shape, torch.bfloat16, target):
                if "KV_FORMAT" in spec.constexprs:
                    assert spec.constexprs["KV_FORMAT"] == _expected_format(kv_dtype, op, target), spec.label
                jobs.append((spec, aot_target(target)))
    return jobs


@pytest.mark.parametrize("kv_dtype", list(KV_DTYPES))
def test_fp8_kv_kernels_lower_without_spills(kv_dtype):
    jobs = _jobs(kv_dtype, _shapes(kv_dtype))
    # MLA in small (one latent head of 64 + 16 with V a view of it: the split head dim)
    jobs += [(s, t) for s, t in _jobs(kv_dtype, {"decode_attention": {"batch": 2, "context_len": 64, "q_heads": 16,
                                                 "kv_heads": 1, "head_dim": 80, "v_head_dim": 64,
                                                 "kv_dtype": kv_dtype}})]  # fmt: skip
    assert {s.name for s, _ in jobs} >= {"store_kv_kernel", "decode_partial_kernel", "extend_kernel"}
    for result in compile_ahead_of_time(jobs, artifacts=True):
        assert result["ok"], f"{result['spec'].label} on {result['target']}: {result.get('error')}"
        cost = kernel_cost(result)
        assert cost["spill_bytes"] == 0, f"{result['spec'].label} on {result['target']}: {cost}"


def test_model_dtype_pool_plans_no_fp8_code():
    for spec, _ in _jobs("auto", _shapes("auto")):
        assert spec.constexprs.get("KV_FORMAT", 0) == 0
