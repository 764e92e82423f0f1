"""fused_experts against a token-by-token oracle written here.

The oracle walks tokens and their K choices (the kernels and the reference
walk experts) in float64, rounding where the op's contract says the value
is stored in the input dtype: the activation output (SGLang's intermediate
cache) and each choice's weighted output; the K outputs are summed in
float64 and rounded once.
"""

import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies
from strategies import DEVICE

import kunlun_triton
from kunlun_triton.ops import fused_experts
from kunlun_triton.ops.moe import reference
from kunlun_triton.runtime import FLOAT_DTYPES, clear_config_cache, get_config
from kunlun_triton.testing import SHIPPED_TARGETS, assert_close, shipped_target, target_id

plan_module = importlib.import_module("kunlun_triton.ops.moe.experts_plan")  # where the plan binds its kernels


def oracle(hidden_states, w13, w2, topk_weights, topk_ids, activation="silu", apply_router_weight_on_input=False):
    dtype = hidden_states.dtype
    inter = w13.shape[1] // 2
    out = torch.zeros(hidden_states.shape, dtype=torch.float64)
    for t in range(hidden_states.shape[0]):
        for k in range(topk_ids.shape[1]):
            e, w = int(topk_ids[t, k]), float(topk_weights[t, k])
            if not 0 <= e < w13.shape[0]:
                continue
            x = hidden_states[t].double().cpu() * (w if apply_router_weight_on_input else 1.0)
            gate_up = w13[e].double().cpu() @ x
            gate = gate_up[:inter]
            if activation == "silu":
                act = gate / (1 + torch.exp(-gate))
            elif activation == "gelu":
                act = 0.5 * gate * (1 + torch.erf(gate / 2**0.5))
            else:
                act = 0.5 * gate * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (gate + 0.044715 * gate**3)))
            h = (act * gate_up[inter:]).to(dtype).double()
            y = w2[e].double().cpu() @ h * (1.0 if apply_router_weight_on_input else w)
            out[t] += y.to(dtype).double()
    return out.to(dtype).to(hidden_states.device)


def _check(case, **kw):
    kunlun_triton.reset_dispatch_report()
    out = fused_experts(**case, **kw)
    assert kunlun_triton.dispatch_report()["fused_experts"]["impl"] == "triton"
    x = case["hidden_states"]
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert_close(out, oracle(**case), scale=2)
    return out


@given(case=strategies.moe_cases())
def test_matches_oracle(case):
    _check(case)


@settings(max_examples=6)
@given(case=strategies.moe_cases(max_tokens=6), formulation=st.sampled_from(["dot", "sum"]))
def test_both_formulations(case, formulation):
    _check(case, formulation=formulation)


def _case(tokens, experts, top_k, hidden, inter, dtype, seed=0, ids=None):
    gen = torch.Generator().manual_seed(seed)
    if ids is None:
        ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    return dict(
        hidden_states=torch.randn(tokens, hidden, generator=gen).to(dtype).to(DEVICE),
        w13=(torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5).to(dtype).to(DEVICE),
        w2=(torch.randn(experts, hidden, inter, generator=gen) / inter**0.5).to(dtype).to(DEVICE),
        topk_weights=torch.rand(tokens, top_k, generator=gen).to(DEVICE),
        topk_ids=ids.to(torch.int32).to(DEVICE),
    )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_many_slots_take_the_multi_program_alignment(dtype):
    # 75 x 4 = 300 slots > 256: count, prefix and scatter launches, several chunks' worth of blocks
    _check(_case(75, 16, 4, 40, 24, dtype, seed=3))


def test_prefill_of_thousands_of_tokens():
    _check(_case(1024, 8, 2, 16, 24, torch.bfloat16, seed=6))


def test_every_token_to_one_expert_over_many_blocks():
    ids = torch.full((70, 1), 5)
    _check(_case(70, 8, 1, 64, 33, torch.float16, ids=ids))


def test_decode_one_token_with_many_experts():
    # E = 256, K = 8: 248 experts get no token and own no block
    _check(_case(1, 256, 8, 32, 16, torch.bfloat16, seed=1))


@pytest.mark.parametrize("top_k", [1, 3])
def test_out_may_be_the_input_itself(top_k):
    """SGLang's runner writes the output over hidden_states (``inplace``):
    the result is the oracle's on the original input, for K = 1 (the down
    projection writes the output directly) and K > 1 (the sum does)."""
    case = _case(11, 6, top_k, 40, 24, torch.float16, seed=8)
    expected = oracle(**case)
    x = case["hidden_states"]
    kunlun_triton.reset_dispatch_report()
    out = fused_experts(**case, out=x)
    assert kunlun_triton.dispatch_report()["fused_experts"]["impl"] == "triton"
    assert out is x
    assert_close(x, expected, scale=2)


def test_out_receives_the_result_and_a_bad_out_changes_nothing():
    case = _case(5, 4, 2, 32, 16, torch.float32, seed=9)
    out = torch.full((5, 32), 7.0, device=DEVICE)
    assert fused_experts(**case, out=out) is out
    assert_close(out, oracle(**case))
    x_before, wrong = case["hidden_states"].clone(), torch.full((5, 32), 7.0, dtype=torch.float16, device=DEVICE)
    with pytest.raises(ValueError, match="dtypes of out"):
        fused_experts(**case, out=wrong)
    assert bool((wrong == 7).all()) and torch.equal(case["hidden_states"], x_before)


def test_empty_batch_returns_empty_output():
    case = _case(0, 4, 2, 16, 8, torch.float16, ids=torch.zeros(0, 2, dtype=torch.int32))
    out = fused_experts(**case)
    assert out.shape == (0, 16) and out.dtype == torch.float16


def test_reference_fallback_matches_the_oracle(monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", "torch")
    kunlun_triton.reset_dispatch_report()
    case = _case(9, 6, 3, 40, 24, torch.float32, seed=4)
    case["topk_ids"][0, 1] = -1  # unchecked, an id outside [0, E) contributes nothing
    out = fused_experts(**case, check=False)
    assert kunlun_triton.dispatch_report()["fused_experts"]["impl"] == "torch"
    assert_close(out, oracle(**case))
    x = case["hidden_states"]
    assert fused_experts(**case, out=x, check=False) is x  # in place on the fallback too
    assert_close(x, out)


def test_ids_outside_the_experts_contribute_nothing_unchecked():
    """Expert parallelism marks other ranks' experts -1: unchecked, those
    slots add nothing; checked, they raise."""
    case = _case(20, 8, 2, 40, 24, torch.float32, seed=5)
    case["topk_ids"][::3, 0] = -1
    case["topk_ids"][1, 1] = 8
    assert_close(fused_experts(**case, check=False), oracle(**case))
    with pytest.raises(ValueError, match="topk_ids holds expert id -1"):
        fused_experts(**case)


@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("tokens", [9, 260])  # 260 slots at K = 1: the multi-launch alignment
@pytest.mark.parametrize("inplace", [False, True])
def test_ids_may_be_invalid_contribute_zero_for_every_k(top_k, tokens, inplace):
    """SGLang's EP marks another rank's expert -1 (K = 1 included: a token
    whose only expert lives elsewhere); with ids_may_be_invalid its row is
    exactly zero, the others as the torch reference, checked mode accepting
    them. `out` starts as garbage (NaN) or is the input (SGLang's inplace)."""
    case = _case(tokens, 6, top_k, 40, 24, torch.float32, seed=7 + top_k)
    ids = case["topk_ids"]
    ids[::3, 0] = -1
    ids[1::4, -1] = 6  # any id outside [0, E), not just -1
    expected = reference.fused_experts(**case)
    x = case["hidden_states"]
    out = x if inplace else torch.full_like(x, float("nan"))
    kunlun_triton.reset_dispatch_report()
    got = fused_experts(**{**case, "hidden_states": x.clone() if not inplace else x}, out=out, ids_may_be_invalid=True)
    assert got is out and kunlun_triton.dispatch_report()["fused_experts"]["impl"] == "triton"
    dropped = (ids < 0) | (ids >= 6)
    assert bool((got[dropped.all(1)] == 0).all()), "a token with no local expert gets an exact zero row"
    assert_close(got, expected)


@pytest.mark.parametrize("target", SHIPPED_TARGETS, ids=target_id)
def test_shipped_configs_of_every_target(target):
    """Each target's tiles (Kunlun: sum, 4-row blocks) are right here too."""
    for tokens in (3, 80):
        case = _case(tokens, 8, 2, 40, 24, torch.float16, seed=tokens)
        config = get_config("fused_experts", target=target, tokens=1 << (tokens - 1).bit_length(), num_experts=8,
                            top_k=2, hidden_size=40, intermediate_size=24)  # fmt: skip
        assert_close(fused_experts(**case, config=config), oracle(**case), scale=2, msg=f"{target.name} T={tokens}")


def test_kunlun_masked_loads_zeroed_after_the_load(monkeypatch):
    """With Kunlun's capability profile (masked loads may ignore other=, no
    tl.dot) the kernels zero masked lanes with tl.where and use the sum
    formulation: ragged H and I still give the oracle's answer."""
    kunlun = kunlun_triton.runtime.capabilities(shipped_target("kunlun"))
    assert kunlun.load_ignores_other and not kunlun.has_dot
    monkeypatch.setattr(plan_module, "capabilities", lambda target=None: kunlun)
    clear_config_cache()  # plans are cached per target: forget the ones built with this target's own profile
    launched = set()
    for tokens in (5, 88):  # one-program and three-launch alignment
        case = _case(tokens, 6, 3, 40, 24, torch.float32, seed=tokens)
        with monkeypatch.context() as patch:
            patch.setattr(plan_module, "moe_gate_up_kernel", _Recorder(plan_module.moe_gate_up_kernel, launched))
            out = fused_experts(**case, config={"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16})
        assert_close(out, oracle(**case))
    clear_config_cache()
    assert launched and all(not dict(meta)["USE_DOT"] and dict(meta)["ZERO_AFTER_LOAD"] for _, meta in launched)


class _Recorder:
    """Wraps a kernel: records the constexprs of every launch, then launches."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen
        self.arg_names = kernel.arg_names  # launchers order constexprs by it (`ops.launch`)

    def run(self, *args, grid, warmup, **kwargs):  # launchers call kernel.run (`ops.launch`)
        bound = {**dict(zip(self.arg_names, args)), **kwargs}
        constexprs = {k: v for k, v in bound.items() if k[:1].isupper()}
        self.seen.add((self.kernel.fn.__name__, tuple(sorted(constexprs.items()))))
        return self.kernel.run(*args, grid=grid, warmup=warmup, **kwargs)


def test_one_compilation_serves_every_token_count(monkeypatch):
    """A server sees every token count: within a config, each kernel launches
    with the same constexprs whatever T is (its runtime sizes are not
    specialised either), so nothing recompiles as batches change."""
    seen = set()
    for name in ("moe_gate_up_kernel", "moe_down_kernel", "moe_sum_kernel"):
        monkeypatch.setattr(plan_module, name, _Recorder(getattr(plan_module, name), seen))
    align = plan_module.align
    for name in ("moe_align_single_kernel", "moe_align_count_kernel", "moe_align_prefix_kernel",
                 "moe_align_scatter_kernel"):  # fmt: skip
        monkeypatch.setattr(align, name, _Recorder(getattr(align, name), seen))
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32}
    for tokens in (1, 2, 7, 16, 40, 100):
        case = _case(tokens, 8, 3, 40, 24, torch.float16, seed=tokens)
        fused_experts(**case, config=config)
    kernels = [name for name, _ in seen]
    assert sorted(kernels) == sorted(set(kernels)), sorted(seen)  # one constexpr set per kernel
    assert set(kernels) == {"moe_align_single_kernel", "moe_align_count_kernel", "moe_align_prefix_kernel",
                            "moe_align_scatter_kernel", "moe_gate_up_kernel", "moe_down_kernel", "moe_sum_kernel"}
