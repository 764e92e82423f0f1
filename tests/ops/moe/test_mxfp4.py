"""MXFP4 experts: the in-kernel decode (`ops.moe.mxfp4`) and the pure-torch
`dequantize_mxfp4` against gguf's MXFP4 dequantizer (its own e2m1 table and
e8m0 decode, repacked from gpt-oss's nibble order to ggml's), every nibble
at exponents from 0 to 254 (255: NaN, the OCP spec); fused_experts with
MXFP4 weights against a float64 oracle on gguf-dequantized weights; and the
expert-weight bytes a decode token reads, counted under the interpreter."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from gguf.quants import MXFP4 as GGUF_MXFP4
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import DEVICE, seeds

import kunlun_triton
from kunlun_triton.ops import fused_experts
from kunlun_triton.ops.moe import dequantize_mxfp4
from kunlun_triton.ops.moe.mxfp4 import mxfp4_pair
from kunlun_triton.testing import assert_close

EXPONENTS = [0, 1, 2, 64, 100, 119, 126, 127, 128, 131, 200, 253, 254]


def gguf_dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[N, K / 2] gpt-oss bytes (2j low, 2j + 1 high nibble) + [N, K / 32]
    e8m0 -> fp32 [N, K] through gguf (element j of a ggml block in qs[j]'s
    low nibble, j + 16 in its high nibble)."""
    b = blocks.numpy().reshape(-1, 16)
    codes = np.stack([b & 15, b >> 4], -1).reshape(-1, 32)  # gpt-oss order: element 2j, 2j + 1
    qs = (codes[:, :16] | (codes[:, 16:] << 4)).astype(np.uint8)
    ggml = np.concatenate([scales.numpy().reshape(-1, 1), qs], -1)
    return torch.from_numpy(GGUF_MXFP4.dequantize_blocks(ggml).reshape(blocks.shape[0], -1).copy())


def every_code_at(exponents):
    """bytes [len(exponents) * 8, 16] holding all 256 byte values (every
    nibble pair) per exponent, and their scales [.., 1]."""
    blocks = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(16, 16).repeat(len(exponents), 1)
    scales = torch.tensor(exponents, dtype=torch.uint8).repeat_interleave(16).view(-1, 1)
    return blocks, scales


@triton.jit
def _decode_kernel(blocks_ptr, scales_ptr, out_ptr, N: tl.constexpr):
    """out[n, 2j] / out[n, 2j + 1] = mxfp4_pair of rows n's 16 bytes (fp32)."""
    j = tl.arange(0, 16)[:, None]
    n = tl.program_id(0) * N + tl.arange(0, N)[None, :]
    scales = tl.load(scales_ptr + tl.program_id(0) * N + tl.arange(0, N))  # [N], as the GEMM loops load them
    even, odd = mxfp4_pair(tl.load(blocks_ptr + n * 16 + j), scales, tl.float32)
    tl.store(out_ptr + n * 32 + 2 * j, even)
    tl.store(out_ptr + n * 32 + 2 * j + 1, odd)


def test_kernel_decode_of_every_nibble_matches_gguf():
    blocks, scales = every_code_at(EXPONENTS)
    out = torch.empty(blocks.shape[0], 32, device=DEVICE)
    _decode_kernel[(blocks.shape[0] // 16,)](blocks.to(DEVICE), scales.to(DEVICE), out, N=16)
    expected = gguf_dequantize(blocks, scales)
    # (e = 254 with |v| >= 2 overflows fp32 to +-inf in both; code 8 is -0 here, +0 in gguf's int table: equal)
    assert torch.equal(out.cpu(), expected), (out.cpu() - expected).abs().max()


def test_kernel_decode_of_e8m0_255_is_nan():
    blocks, scales = every_code_at([255])
    out = torch.empty(16, 32, device=DEVICE)
    _decode_kernel[(1,)](blocks.to(DEVICE), scales.to(DEVICE), out, N=16)
    assert bool(out.isnan().all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_dequantizer_matches_gguf(dtype):
    blocks, scales = every_code_at(EXPONENTS)
    expected = gguf_dequantize(blocks, scales)
    assert torch.equal(dequantize_mxfp4(blocks, scales, torch.float32), expected)
    assert torch.equal(dequantize_mxfp4(blocks, scales, dtype).float(), expected.to(dtype).float())
    # gpt-oss's [E, N, K / 32, 16] blocks: the same values per expert
    stacked = dequantize_mxfp4(blocks.view(2, -1, 1, 16), scales.view(2, -1, 1), torch.float32)
    assert torch.equal(stacked.flatten(0, 1), expected)
    assert bool(dequantize_mxfp4(*every_code_at([255]), torch.float32).isnan().all())


def quantize_mxfp4(experts, rows, k, gen, exponents=(118, 127)):
    """Random MXFP4 weights in gpt-oss's layout: uniform bytes (all nibbles),
    scales drawn from `exponents` (a range), both [E, rows, ...] uint8."""
    blocks = torch.randint(0, 256, (experts, rows, k // 32, 16), generator=gen, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(exponents[0], exponents[1] + 1, (experts, rows, k // 32), generator=gen,
                           dtype=torch.int32).to(torch.uint8)  # fmt: skip
    return blocks, scales


def oracle(x, w13, w2, b1, b2, ids, weights, gpt_oss):
    """float64 token by token on dequantized [E, 2I, H] / [E, H, I] weights."""
    dtype, out = x.dtype, torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e, w = int(ids[t, k]), float(weights[t, k])
            gate_up = w13[e].double() @ x[t].double()
            if gpt_oss:
                gate_up = gate_up + b1[e].double()
                gate, up = gate_up[0::2].clamp(max=7.0), gate_up[1::2].clamp(-7.0, 7.0)
                h = gate * torch.sigmoid(1.702 * gate) * (up + 1)
            else:
                inter = w13.shape[1] // 2
                h = torch.nn.functional.silu(gate_up[:inter]) * gate_up[inter:]
            y = w2[e].double() @ h.to(dtype).double()
            if gpt_oss:
                y = y + b2[e].double()
            out[t] += (y * w).to(dtype).double()
    return out.to(dtype)


def mxfp4_case(experts, top_k, tokens, hidden, inter, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    w13 = quantize_mxfp4(experts, 2 * inter, hidden, gen, (121, 126))
    w2 = quantize_mxfp4(experts, hidden, inter, gen, (119, 124))
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)]).int()
    weights = torch.softmax(torch.randn(tokens, top_k, generator=gen), -1)
    b1 = (torch.randn(experts, 2 * inter, generator=gen) * 3).to(torch.bfloat16)
    b2 = torch.randn(experts, hidden, generator=gen).to(torch.bfloat16)
    return w13, w2, x, ids, weights, b1, b2


def dense(blocks, scales):
    return torch.stack([gguf_dequantize(b.flatten(1), s) for b, s in zip(blocks, scales)])


@settings(max_examples=16, deadline=None)
@given(experts=st.sampled_from([1, 2, 4, 8]), top_k=st.integers(1, 4), tokens=st.integers(1, 12), seed=seeds(),
       dtype=st.sampled_from([torch.bfloat16, torch.float32]), hidden=st.sampled_from([32, 64, 96]),
       inter=st.sampled_from([32, 64]), gpt_oss=st.booleans(), formulation=st.sampled_from(["dot", "sum", None]),
       blocks_4d=st.booleans())  # fmt: skip
def test_mxfp4_experts_match_oracle(experts, top_k, tokens, seed, dtype, hidden, inter, gpt_oss, formulation, blocks_4d):
    top_k = min(top_k, experts)
    (q13, s13), (q2, s2), x, ids, weights, b1, b2 = mxfp4_case(experts, top_k, tokens, hidden, inter, dtype, seed)
    w13, w2 = (q13, q2) if blocks_4d else (q13.flatten(2), q2.flatten(2))
    extra = dict(b1=b1.to(DEVICE), b2=b2.to(DEVICE), gemm1_alpha=1.702, gemm1_limit=7.0) if gpt_oss else {}
    kunlun_triton.reset_dispatch_report()
    out = fused_experts(x.to(DEVICE), w13.to(DEVICE), w2.to(DEVICE), weights.to(DEVICE), ids.to(DEVICE),
                        use_mxfp4_w4a16=True, w13_scale=s13.to(DEVICE), w2_scale=s2.to(DEVICE),
                        formulation=formulation, **extra).cpu()  # fmt: skip
    assert kunlun_triton.dispatch_report()["fused_experts"]["impl"] == "triton"
    assert_close(out, oracle(x, dense(q13, s13), dense(q2, s2), b1, b2, ids, weights, gpt_oss), scale=3)


def test_mxfp4_prefill_takes_the_multi_launch_path():
    """300 slots (> 256): the three-launch alignment and separate GEMM launches."""
    (q13, s13), (q2, s2), x, ids, weights, b1, b2 = mxfp4_case(8, 2, 150, 64, 32, torch.bfloat16, seed=2)
    out = fused_experts(x.to(DEVICE), q13.to(DEVICE), q2.to(DEVICE), weights.to(DEVICE), ids.to(DEVICE),
                        use_mxfp4_w4a16=True, w13_scale=s13.to(DEVICE), w2_scale=s2.to(DEVICE), b1=b1.to(DEVICE),
                        b2=b2.to(DEVICE), gemm1_alpha=1.702, gemm1_limit=7.0).cpu()  # fmt: skip
    assert_close(out, oracle(x, dense(q13, s13), dense(q2, s2), b1, b2, ids, weights, True), scale=3)


def test_decode_token_reads_about_0_27x_the_bf16_expert_bytes():
    """One decode token, gpt-oss-like K = 4 of E = 8: the MXFP4 kernels read
    each chosen expert's packed weights and scales once (4.25 bits per
    weight: 17 / 64 = 0.266 of bf16's 16), as the bf16 kernels read theirs."""
    from kunlun_triton.introspect.interpreter_counts import count_loads

    hidden, inter, experts, top_k = 64, 64, 8, 4
    (q13, s13), (q2, s2), x, ids, weights, b1, b2 = mxfp4_case(experts, top_k, 1, hidden, inter, torch.bfloat16, 4)
    w13, w2 = dense(q13, s13).bfloat16(), dense(q2, s2).bfloat16()
    with count_loads(w13) as c13, count_loads(w2) as c2:
        fused_experts(x, w13, w2, weights, ids)
    bf16_bytes = c13.bytes + c2.bytes
    assert bf16_bytes == top_k * 3 * hidden * inter * 2
    q13, q2 = q13.flatten(2), q2.flatten(2)
    with count_loads(q13) as c13, count_loads(s13) as cs13, count_loads(q2) as c2, count_loads(s2) as cs2:
        fused_experts(x, q13, q2, weights, ids, use_mxfp4_w4a16=True, w13_scale=s13, w2_scale=s2, b1=b1, b2=b2,
                      gemm1_alpha=1.702, gemm1_limit=7.0)  # fmt: skip
    mxfp4_bytes = c13.bytes + cs13.bytes + c2.bytes + cs2.bytes
    assert c13.bytes + c2.bytes == top_k * 3 * hidden * inter // 2
    assert cs13.bytes + cs2.bytes == top_k * 3 * hidden * inter // 32
    assert mxfp4_bytes / bf16_bytes == pytest.approx(17 / 64)
