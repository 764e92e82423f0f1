"""What the kunlun platform refuses in MoE serving, and how it says so:
all-to-all backends (--moe-a2a-backend), non-triton MoE runner backends and
quantized experts need CUDA-only SGLang kernels, so they fail at start with
an error naming the setting and what to do instead. Expert parallelism on
SGLang's standard dispatcher is served (test_sglang_expert_parallel.py)."""

from types import SimpleNamespace

import pytest
import torch

from kunlun_triton.sglang_plugin.layers import moe


def _args(**kw):
    return SimpleNamespace(**{"ep_size": 1, "moe_a2a_backend": "none", "moe_runner_backend": "auto", **kw})


def test_plain_tensor_parallel_moe_is_accepted():
    moe.check_server_args(_args())
    moe.check_server_args(_args(moe_runner_backend="triton"))
    moe.check_server_args(_args(ep_size=2))  # --ep-size with --moe-a2a-backend none


@pytest.mark.parametrize("args,match", [
    (_args(ep_size=2, moe_a2a_backend="deepep"), "--moe-a2a-backend deepep.*leave --moe-a2a-backend at 'none'"),
    (_args(moe_runner_backend="flashinfer_cutlass"), "--moe-runner-backend flashinfer_cutlass"),
])  # fmt: skip
def test_unsupported_moe_settings_fail_clearly(args, match):
    with pytest.raises(moe.UnsupportedMoE, match=match):
        moe.check_server_args(args)


def _fake_moe_layer(method, ep_size=1):
    """A FusedMoE as check_model sees it (its quant method and EP size), built
    without SGLang's server context."""
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    layer = FusedMoE.__new__(FusedMoE)
    torch.nn.Module.__init__(layer)
    layer.quant_method, layer.moe_ep_size = method, ep_size
    return layer


def test_quantized_moe_layers_are_refused_expert_parallel_ones_served():
    from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod

    class Fp8LikeMoEMethod:  # any method but the unquantized one
        pass

    plain = UnquantizedFusedMoEMethod.__new__(UnquantizedFusedMoEMethod)
    torch.nn.Module.__init__(plain)  # (a BaseFusedOp is a module)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), _fake_moe_layer(plain), _fake_moe_layer(plain))
    assert moe.check_model(model) == 2
    model[2] = _fake_moe_layer(Fp8LikeMoEMethod())
    with pytest.raises(moe.UnsupportedMoE, match="MoE layer 2 uses Fp8LikeMoEMethod.*unquantized, a w8a8_int8 or an MXFP4 checkpoint"):
        moe.check_model(model)
    model[2] = _fake_moe_layer(plain, ep_size=4)  # each rank's local experts, SGLang's -1 for the others
    assert moe.check_model(model) == 2


def test_the_install_table_routes_the_moe_classes_to_our_ops(monkeypatch):
    """The table's MoE touchpoint registers the router and the experts of an
    unquantized FusedMoE under our dispatch key (checked under a key of this
    test's own, so this process's SGLang dispatch is left alone)."""
    from sglang.kernels.fused_op import BaseFusedOp
    from sglang.srt.layers.moe.topk import TopK
    from sglang.srt.layers.quantization.unquant import UnquantizedFusedMoEMethod

    from kunlun_triton.sglang_plugin.install import TOUCHPOINTS
    from kunlun_triton.sglang_plugin.platform.names import DISPATCH_KEY

    keys = []
    monkeypatch.setattr(moe, "register_moe_ops", lambda key: keys.append(key))
    point = next(p for p in TOUCHPOINTS if p.name == "MoE layers")
    assert point.scope == "plugin" and "moe_topk" in point.routes and "fused_experts" in point.routes
    point.apply()
    assert keys == [DISPATCH_KEY]
    monkeypatch.undo()

    names = moe.register_moe_ops("kunlun_moe_test")
    registered = BaseFusedOp._oot_forward_registry.pop("kunlun_moe_test")
    assert names == {TopK: "moe_topk", UnquantizedFusedMoEMethod: "fused_experts"}
    assert registered == {TopK: moe._topk_forward, UnquantizedFusedMoEMethod: moe._experts_forward}
