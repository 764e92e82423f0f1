"""gdn_split_qkvzba against what it stands in for, in the sglang environment
(TRITON_INTERPRET=1 on CPU runs SGLang's Triton kernels too): SGLang 0.5.23's
``fused_qkvzba_split_reshape_cat`` (Qwen3-Next) and
``fused_qkvzba_split_reshape_cat_contiguous`` (Qwen3.5), same outputs bit for
bit, same shapes, strides and dtypes; and HF transformers' Qwen3-Next
ordering (``fix_query_key_value_ordering`` then its forward's flatten and
cat), the oracle of our torch reference. SGLang's interleaved kernel reads
dense rows and power-of-two head groups (``tl.arange`` over K and G V): the
cases stay there; its contiguous one takes a row stride. (Marked ``sglang``
by its name: tests/conftest.py.)"""

from types import SimpleNamespace

import torch
from hypothesis import given, strategies as st

from kunlun_triton.ops import gdn_split_qkvzba
from kunlun_triton.ops.linear_attention import reference


def _sglang(layout):
    from sglang.kernels.ops.attention import triton_gdn_fused_proj as proj

    # __wrapped__: SGLang's own function even where the platform's hook has replaced the name
    fn = (proj.fused_qkvzba_split_reshape_cat if layout == "interleaved"
          else proj.fused_qkvzba_split_reshape_cat_contiguous)  # fmt: skip
    return getattr(fn, "__wrapped__", fn)


@given(layout=st.sampled_from(["interleaved", "contiguous"]), H=st.sampled_from([1, 2]), G=st.sampled_from([1, 2, 4]),
       K=st.sampled_from([8, 16]), V=st.sampled_from([8, 16]), tokens=st.sampled_from([1, 2, 5]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), pad=st.sampled_from([0, 4]),
       seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_equals_sglangs_kernels(layout, H, G, K, V, tokens, dtype, pad, seed):
    HV, gen = H * G, torch.Generator().manual_seed(seed)
    width = 2 * H * K + 2 * HV * V
    pad = pad if layout == "contiguous" else 0  # the interleaved kernel ignores row strides
    qkvz = torch.randn(tokens, width + pad, generator=gen).to(dtype)[:, :width]
    ba = torch.randn(tokens, 2 * HV + pad, generator=gen).to(dtype)[:, : 2 * HV]
    want = _sglang(layout)(qkvz, ba, H, HV, K, V)
    got = gdn_split_qkvzba(qkvz, ba, H, HV, K, V, layout)
    for name, g, w in zip(("mixed_qkv", "z", "b", "a"), got, want):
        assert (g.shape, g.stride(), g.dtype) == (w.shape, w.stride(), w.dtype), name
        assert torch.equal(g, w), name


@given(H=st.sampled_from([1, 2, 3]), G=st.sampled_from([1, 2, 3, 4]), K=st.sampled_from([4, 12]),
       V=st.sampled_from([4, 10]), tokens=st.sampled_from([1, 3]), seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_reference_is_hf_qwen3_next_ordering(H, G, K, V, tokens, seed):
    """(HF's reshape to -1 cannot take 0 tokens; the reference can: the oracle test.)"""
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    HV, gen = H * G, torch.Generator().manual_seed(seed)
    qkvz = torch.randn(tokens, 2 * H * K + 2 * HV * V, generator=gen)
    ba = torch.randn(tokens, 2 * HV, generator=gen)
    layer = SimpleNamespace(num_k_heads=H, num_v_heads=HV, head_k_dim=K, head_v_dim=V)
    q, k, v, z, b, a = Qwen3NextGatedDeltaNet.fix_query_key_value_ordering(layer, qkvz[None], ba[None])
    mixed_qkv = torch.cat([x.reshape(1, tokens, x.shape[2] * x.shape[3]) for x in (q, k, v)], dim=-1)  # HF's forward
    for name, ours, hf in zip(("mixed_qkv", "z", "b", "a"), reference.gdn_split_qkvzba(qkvz, ba, H, HV, K, V),
                              (mixed_qkv[0], z[0], b[0], a[0])):  # fmt: skip
        assert torch.equal(ours, hf), name
