"""The fused-op forwards we register for SGLang's layers: the rotary forward
casts the layer's cos/sin cache once per dtype and device (not on every
layer call), leaves the layer's own cache alone, and computes what
SGLang's ``forward_native`` computes."""

import torch

from strategies import DEVICE

from kunlun_triton.sglang_plugin.layers.fused_ops import _rotary_forward, rotary_cache_for
from kunlun_triton.testing import assert_close


def _layer():
    from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding

    return RotaryEmbedding(16, 16, 64, 10000, True, torch.float32).to(DEVICE)


def test_rotary_cache_is_cast_once_per_dtype_and_device():
    layer = _layer()
    source = layer.cos_sin_cache
    first = rotary_cache_for(layer, torch.bfloat16, source.device)
    assert first.dtype == torch.bfloat16 and first is not source
    assert rotary_cache_for(layer, torch.bfloat16, source.device) is first, "cast again on the next call"
    assert rotary_cache_for(layer, torch.float32, source.device) is source, "same dtype: no copy at all"
    assert layer.cos_sin_cache is source and source.dtype == torch.float32, "the layer's cache was replaced"
    layer.cos_sin_cache = source * 1.0  # a layer that rebuilds its cache gets a fresh cast
    assert rotary_cache_for(layer, torch.bfloat16, source.device) is not first


def test_rotary_forward_matches_forward_native_across_calls():
    layer = _layer()
    gen = torch.Generator().manual_seed(0)
    for step in range(3):  # several layer calls share the one cast
        positions = torch.randint(0, 64, (5,), generator=gen).to(DEVICE)
        q = torch.randn(5, 4 * 16, generator=gen).to(torch.bfloat16).to(DEVICE)
        k = torch.randn(5, 2 * 16, generator=gen).to(torch.bfloat16).to(DEVICE)
        expected_q, expected_k = layer.forward_native(positions, q.clone(), k.clone())
        got_q, got_k = _rotary_forward(layer, positions, q, k)
        assert_close(got_q, expected_q, scale=2, msg=f"call {step}")
        assert_close(got_k, expected_k, scale=2, msg=f"call {step}")
    assert layer.cos_sin_cache.dtype == torch.float32


def test_deepseek_yarn_rotary_matches_its_forward_native_on_strided_views():
    """DeepSeek's YaRN rotary (mscale folded into its cache, GPT-J pairs) on the
    rope slices of q [tokens, heads, nope + rope] and of the latent row."""
    from sglang.srt.layers.rotary_embedding.rope_variant import DeepseekScalingRotaryEmbedding

    from kunlun_triton.sglang_plugin.layers.fused_ops import _deepseek_rotary_forward

    layer = DeepseekScalingRotaryEmbedding(16, 16, 256, 10000, False, 4.0, torch.float32, beta_fast=32, beta_slow=1,
                                           mscale=0.707, mscale_all_dim=0.707).to(DEVICE)  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    positions = torch.randint(0, 1024, (6,), generator=gen).to(DEVICE)
    q = torch.randn(6, 4, 32, generator=gen).to(DEVICE)
    latent = torch.randn(6, 1, 64 + 16, generator=gen).to(DEVICE)
    q_pe, k_pe = q[..., 16:], latent[..., 64:]
    expected_q, expected_k = layer.forward_native(positions, q_pe.clone(), k_pe.clone())
    untouched_q, untouched_latent = q[..., :16].clone(), latent[..., :64].clone()
    got_q, got_k = _deepseek_rotary_forward(layer, positions, q_pe, k_pe)
    assert got_q is q_pe and got_k is k_pe, "rotated in place"
    assert_close(q[..., 16:], expected_q)
    assert_close(latent[..., 64:], expected_k)
    assert torch.equal(q[..., :16], untouched_q) and torch.equal(latent[..., :64], untouched_latent)


def test_logit_softcap_hook_matches_sglang_cpu_formula_in_place():
    """The hook on the logits processor's ``fused_softcap``: SGLang's own CPU
    path computes cap * tanh(x / cap); ours does it in place, on a row slice
    of a wider buffer as well."""
    from kunlun_triton.sglang_plugin.layers.fused_ops import softcap_logits

    def unreachable(*args):
        raise AssertionError("fell back to SGLang's CUDA kernel")

    base = 40 * torch.randn(3, 300, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    logits = base[:, :257]
    expected = 30.0 * torch.tanh(logits / 30.0)
    out = softcap_logits(unreachable, logits, 30.0)
    assert out.data_ptr() == logits.data_ptr()
    assert_close(logits, expected)
    assert torch.equal(base[:, 257:], (40 * torch.randn(3, 300, generator=torch.Generator().manual_seed(1)))[:, 257:].to(DEVICE))


def test_fused_op_forwards_are_the_specs_with_an_sglang_forward():
    """What the plugin registers with SGLang's BaseFusedOp is what the op
    specs declare (`OpSpec.sglang_forward`; install.FUSED_OPS is checked
    against the same specs in tests/ops/test_registry.py)."""
    from kunlun_triton.ops.spec import all_specs
    from kunlun_triton.sglang_plugin.layers.fused_ops import register_fused_ops

    registered = register_fused_ops("kunlun_registry_test")  # {layer class: op name}
    declared = {name: spec.sglang_forward.removesuffix("(+subclasses)") for name, spec in all_specs().items()
                if spec.sglang_forward}  # fmt: skip

    def is_layer(cls, layer):
        return any(base.__name__ == layer for base in cls.__mro__)

    for cls, name in registered.items():
        assert name in declared and is_layer(cls, declared[name]), (cls, name)
    # every declared layer is registered (RMSNorm's one forward serves rms_norm and fused_add_rms_norm)
    for name, layer in declared.items():
        assert any(cls.__name__ == layer for cls in registered), (name, layer)


def test_elementwise_layers_named_by_a_spec_compute_what_sglang_native_does():
    """A spec naming an SGLang layer with no forward of its own in the plugin
    (`elementwise_forward`: y = op(x)) is served by the spec's function: the
    registered forward matches the layer's own ``forward_native`` (SGLang's
    torch code: the oracle) within the float32 tolerance (SiluAndMul today)."""
    from sglang.kernels.fused_op import BaseFusedOp

    from kunlun_triton.ops.spec import all_specs
    from kunlun_triton.sglang_plugin.layers.fused_ops import register_fused_ops

    registered = register_fused_ops("kunlun_elementwise_test")
    forwards = BaseFusedOp._oot_forward_registry.pop("kunlun_elementwise_test")
    generic = {cls: fn for cls, fn in forwards.items() if fn.__name__ == f"{registered[cls]}_forward"}
    assert generic, "no layer is served by the elementwise forward"
    for cls, fn in generic.items():
        assert all_specs()[registered[cls]].sglang_forward == cls.__name__
        x = torch.randn(5, 2 * 48, generator=torch.Generator().manual_seed(3)).to(DEVICE)
        assert_close(fn(cls(), x), cls().forward_native(x))
