"""Our kernels against SGLang's own Triton decode and extend kernels on the
same inputs. Collected only where SGLang is installed (see tests/conftest.py)."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.ops import decode_attention, extend_attention
from kunlun_triton.sglang_plugin.tools.baselines.attention import sglang_decode, sglang_extend
from kunlun_triton.testing import assert_close


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("kv_heads, group, head_dim, logit_cap", [(2, 1, 64, 0.0), (2, 4, 128, 0.0), (1, 8, 80, 30.0)])
def test_decode_matches_sglang(formulation, kv_heads, group, head_dim, logit_cap):
    b = decode_batch([37, 1, 64], q_heads=kv_heads * group, kv_heads=kv_heads, head_dim=head_dim,
                     dtype=torch.float16, device=DEVICE, page_size=16, seed=head_dim, logit_cap=logit_cap)
    ours = decode_attention(*b.args(), logit_cap=logit_cap, formulation=formulation)
    theirs = sglang_decode(*b.args(), logit_cap=logit_cap)()
    assert_close(ours, theirs, scale=2)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("kv_heads, group, head_dim, window", [(2, 1, 64, None), (2, 4, 128, None), (1, 4, 96, 9)])
def test_extend_matches_sglang(formulation, kv_heads, group, head_dim, window):
    b = extend_batch([20, 0, 7], [9, 16, 1], q_heads=kv_heads * group, kv_heads=kv_heads, head_dim=head_dim,
                     dtype=torch.float16, device=DEVICE, page_size=16, seed=head_dim, sliding_window=window)
    ours = extend_attention(*b.args(), sliding_window=window, formulation=formulation)
    theirs = sglang_extend(*b.args(), sliding_window=window)()
    assert_close(ours, theirs, scale=2)


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_mla_extend_matches_sglang(formulation):
    """MLA (one latent head of 64 + 16 rope, V the latent): ours takes V from
    the K tile (the pool's latent view, the new tokens' too), SGLang's
    extend loads it (its model passes k_nope, a copy): same answers."""
    latent = 64
    b = extend_batch([20, 0, 33], [9, 16, 5], q_heads=8, kv_heads=1, head_dim=latent + 16, v_head_dim=latent,
                     dtype=torch.float16, device=DEVICE, page_size=16, seed=24)  # fmt: skip
    b.pool.v_buffer = b.pool.k_buffer[..., :latent]
    nope = b.k_extend[..., :latent].clone()
    b.v_extend = b.k_extend[..., :latent]
    ours = extend_attention(*b.args(), formulation=formulation)
    b.v_extend = nope
    theirs = sglang_extend(*b.args())()
    assert_close(ours, theirs, scale=2)


def test_the_plugin_passes_mla_v_as_the_latent_view_and_checks_it():
    from kunlun_triton.ops.attention.shared import latent_view
    from kunlun_triton.sglang_plugin.backends.attention import _latent_of

    k = torch.randn(6, 1, 80)
    k[2, 0, 3] = float("nan")
    v = _latent_of(k, k[..., :64].clone(), check=True)
    assert latent_view(k, v) and torch.equal(v.nan_to_num(), k[..., :64].nan_to_num())
    other = k[..., :64].clone()
    other[4, 0, 7] += 1
    with pytest.raises(ValueError, match="MLA extend: v_extend is not k_extend"):
        _latent_of(k, other, check=True)
