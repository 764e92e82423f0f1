"""Our kernels against SGLang's own Triton decode and extend kernels on the
same inputs. Collected only where SGLang is installed (see tests/conftest.py)."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.ops import decode_attention, extend_attention
from kunlun_triton.sglang_plugin.baselines.attention import sglang_decode, sglang_extend
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
