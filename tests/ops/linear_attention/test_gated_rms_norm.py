"""gated_rms_norm (Qwen3-Next's RMSNormGated, norm before gate) against a
float64 oracle written here: x / sqrt(mean(x^2) + eps) * w * z * sigmoid(z)."""

import pytest
import torch
from hypothesis import given, strategies as st

from strategies import DEVICE, row_tensors

from kunlun_triton.ops import gated_rms_norm


@given(x=row_tensors(), seed=st.integers(0, 2**31 - 1), eps=st.sampled_from([1e-6, 1e-5]))
def test_gated_rms_norm_matches_the_oracle(x, seed, eps):
    gen = torch.Generator().manual_seed(seed)
    z = (torch.randn(x.shape, generator=gen) * 3).to(x.dtype).to(DEVICE)
    w = (torch.rand(x.shape[-1], generator=gen) + 0.5).to(x.dtype).to(DEVICE)
    x64, z64 = x.double().cpu(), z.double().cpu()
    want = x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + eps) * w.double().cpu() * z64 * torch.sigmoid(z64)
    got = gated_rms_norm(x, z, w, eps)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[x.dtype]
    torch.testing.assert_close(got.double().cpu(), want, atol=tol, rtol=tol)
    assert got.dtype == x.dtype and got.shape == x.shape


def test_rows_of_heads_as_sglang_hands_them():
    """[tokens, value heads, head_dim] viewed as rows of one head each."""
    gen = torch.Generator().manual_seed(1)
    x, z = (torch.randn(5, 4, 32, generator=gen).to(DEVICE) for _ in range(2))
    w = torch.rand(32, generator=gen).to(DEVICE)
    want = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double() * torch.nn.functional.silu(z.double())
    torch.testing.assert_close(gated_rms_norm(x.view(-1, 32), z.view(-1, 32), w).view(5, 4, 32).double(), want,
                               atol=1e-5, rtol=1e-5)  # fmt: skip


@pytest.mark.parametrize("change, match", [
    (dict(z=torch.zeros(3, 8)), "x's and z's shapes"),
    (dict(group_size=4), "group_size must be None or the row width 16"),
    (dict(eps=-1.0), "eps must be >= 0.0"),
])  # fmt: skip
def test_bad_inputs_are_refused(change, match):
    args = dict(x=torch.randn(3, 16, device=DEVICE), z=torch.randn(3, 16, device=DEVICE),
                weight=torch.rand(16, device=DEVICE))  # fmt: skip
    args.update({k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in change.items()})
    with pytest.raises(ValueError, match=f"gated_rms_norm: {match}"):
        gated_rms_norm(**args)
