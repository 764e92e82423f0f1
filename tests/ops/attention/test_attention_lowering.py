"""Every attention kernel lowers ahead of time for CUDA sm_90 and HIP gfx942,
both formulations, several head dims, fp16 and bf16, as the launchers plan
them (`OpSpec.kernels`); the Kunlun tiles compile without spills (on sm_90,
as a proxy: no Kunlun compiler here)."""

import pytest
import torch

from kunlun_triton.ops.spec import all_specs
from kunlun_triton.runtime import Target, get_config, targeting
from kunlun_triton.testing import assert_lowers, compile_ahead_of_time
from kunlun_triton.testing.sass import kernel_cost

SPECS = all_specs(("attention",))
SM90 = Target("cuda", "sm_90", "cuda", "test")
GFX942 = Target("hip", "gfx942", "cuda", "test")
KUNLUN = Target("kunlun", "p800", "cuda", "test")


def _shapes(head_dim):
    heads = {"q_heads": 8, "kv_heads": 2, "head_dim": head_dim}
    return {
        "store_kv": {"tokens": 7, "kv_heads": 2, "head_dim": head_dim},
        "decode_attention": {"batch": 3, "context_len": 100, **heads},
        "extend_attention": {"batch": 2, "prefix_len": 40, "extend_len": 30, **heads},
    }


def _plan(target, formulation, cases):
    specs = []
    with targeting(target):
        for dtype, head_dim in cases:
            for op, shape in _shapes(head_dim).items():
                spec = SPECS[op]
                config = get_config(op, **_dims(op, shape))
                if op != "store_kv":
                    config["formulation"] = formulation
                if formulation == "sum" and op == "extend_attention":
                    config.update(BLOCK_M=16, BLOCK_N=16)
                specs += spec.kernels(shape, dtype, config)
    return specs


def _dims(op, shape):
    if op == "store_kv":
        return {"row_width": shape["kv_heads"] * shape["head_dim"], "tokens": shape["tokens"]}
    return {"head_dim": shape["head_dim"], "group": shape["q_heads"] // shape["kv_heads"]}


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_attention_kernels_lower(formulation):
    cases = ((torch.float16, 128), (torch.bfloat16, 80), (torch.float16, 13))
    specs = _plan(SM90, formulation, cases)
    assert {s.name for s in specs} == {"store_kv_kernel", "decode_partial_kernel", "decode_merge_kernel", "extend_kernel"}
    assert_lowers(specs, targets=("cuda",))
    assert_lowers(_plan(GFX942, formulation, cases[:1]), targets=("hip",))


def test_windowed_and_capped_kernels_lower():
    """Sliding window and logit cap change the constexprs (and the masked tiles)."""
    specs = []
    with targeting(SM90):
        for op in ("decode_attention", "extend_attention"):
            shape = _shapes(64)[op]
            config = get_config(op, **_dims(op, shape))
            specs += SPECS[op].kernels(shape, torch.float16, config)
    window = [type(s)(s.kernel, s.signature, {**s.constexprs, "WINDOW": 16, "LOGIT_CAP": 30.0}, s.options, s.attrs)
              if "WINDOW" in s.constexprs and "LOGIT_CAP" in s.constexprs else s for s in specs]  # fmt: skip
    assert_lowers(window, targets=("cuda",))


def test_kunlun_tiles_do_not_spill_on_sm90():
    """kunlun-p800.yaml's attention tiles (tl.sum formulation) compiled for
    sm_90 keep everything in registers: the [rows, keys, head_dim] broadcast
    product of the sum formulation is what could spill."""
    specs = []
    with targeting(KUNLUN):
        for op in ("decode_attention", "extend_attention"):
            shape = {**_shapes(128)[op], "q_heads": 32, "kv_heads": 8}
            config = get_config(op, **_dims(op, shape))
            assert config["formulation"] == "sum"
            specs += SPECS[op].kernels(shape, torch.float16, config)
    results = compile_ahead_of_time(specs, targets=("cuda",), artifacts=True)
    for result in results:
        assert result["ok"], result.get("error")
        cost = kernel_cost(result)
        assert cost["spill_bytes"] == 0, f"{result['spec'].label}: {cost}"
