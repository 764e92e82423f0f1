"""The fused-op forwards we register for SGLang's layers: the rotary forward
casts the layer's cos/sin cache once per dtype and device (not on every
layer call), leaves the layer's own cache alone, and computes what
SGLang's ``forward_native`` computes."""

import torch

from strategies import DEVICE

from kunlun_triton.sglang_plugin.fused_ops import _rotary_forward, rotary_cache_for
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
