"""bf16 outputs round to nearest even, as on devices, bit for bit.

Triton's interpreter truncates fp32 -> bf16 (every store rounded toward
zero); `kunlun_triton.runtime.interpreter_bf16` makes it round to nearest
even, installed when the interpreter target is detected. Checked two ways,
against oracles written here in float64:

- the casts themselves (a store's implicit cast, ``.to(tl.bfloat16)``, the
  explicit ``rtne`` mode, and back to fp32), bitwise against torch's
  ``.to(torch.bfloat16)`` on values chosen at ties, carries, NaN, inf,
  overflow and subnormals;
- every op with a bf16 output, on random inputs: its output equals the
  float64 oracle rounded to nearest even bit for bit, except where the
  exact value lies within a few fp32 ulps of a bf16 rounding tie, where the
  kernel's fp32 rounding (a different summation order, ``tl.exp``'s last
  bit) may legitimately decide the other way. Such an exception must be one
  bf16 ulp; ops whose fp32 maths is exact (``store_kv`` moves bits) get no
  window. Truncation fails these by far: about half of all values lie
  above their tie.

Ops not here, and why: the sampling ops output token ids and fp32
probabilities (no bf16 store); ``moe_topk`` outputs fp32 weights and ids;
``fused_experts`` rounds its intermediate activation to bf16 between two
matmuls (as SGLang does), so a tie decided differently there moves the
output far from any tie of the final rounding: it is checked to its bf16
tolerance in tests/ops/moe.
"""

import math

import pytest
import torch
import triton
import triton.language as tl

from strategies import DEVICE

from kunlun_triton import ops
from kunlun_triton.runtime import current_target
from kunlun_triton.introspect.paged import decode_batch, extend_batch

BF16 = torch.bfloat16


def rtne_bits(exact: torch.Tensor) -> torch.Tensor:
    """int32 bit patterns of `exact` (float64) rounded to nearest even in bf16."""
    return exact.to(torch.float32).to(BF16).view(torch.int16).to(torch.int32) & 0xFFFF


def assert_rounded(actual, exact, tie_ulps: int, what: str, where=None, scale=None) -> None:
    """`actual` (bf16) is `exact` (float64) rounded to nearest even, bit for bit,
    except within `tie_ulps` fp32 ulps (of `scale`, default |exact|: the
    size of the terms the kernel added up) of a tie, where it may be one ulp
    off. `where`: the elements the op's fp32 maths computes to a few ulps."""
    assert actual.dtype == BF16, what
    actual, exact = actual.detach().cpu().reshape(-1), exact.detach().cpu().reshape(-1).double()
    assert actual.shape == exact.shape, what
    scale = exact.abs() if scale is None else scale.detach().cpu().reshape(-1).double()
    if where is not None:
        where = where.cpu().reshape(-1)
        assert where.float().mean() > 0.5, f"{what}: the checked elements must be most of them"
        actual, exact, scale = actual[where], exact[where], scale[where]
    got = actual.view(torch.int16).to(torch.int32) & 0xFFFF
    want = rtne_bits(exact)
    # The tie next to the exact value: its fp32 pattern with the low 16 bits
    # 0x8000, halfway between the two bf16 values around it.
    bits32 = exact.to(torch.float32).view(torch.int32)
    tie = ((bits32 & ~0xFFFF) | 0x8000).view(torch.float32).double()
    near_tie = (exact - tie).abs() <= tie_ulps * scale * 2.0**-23
    wrong = got != want
    bad = wrong & ~(near_tie & ((got - want).abs() == 1))
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {got.numel()} bf16 values are not the oracle rounded to nearest even "
        f"({int(wrong.sum())} differ in all; first at {int(bad.nonzero()[0])}: "
        f"got {int(got[bad][0]):#06x}, want {int(want[bad][0]):#06x}, exact {float(exact[bad][0])!r})"
    )
    # The window is a few fp32 ulps of 65536 per bf16 ulp: it must stay a rare exception.
    assert int(wrong.sum()) <= max(2, got.numel() // 200), f"{what}: {int(wrong.sum())} ties decided otherwise"


def test_interpreter_target_rounds_to_nearest_even():
    assert current_target().name == "interpreter"
    from triton.runtime import interpreter

    assert getattr(interpreter.InterpreterBuilder, "_kunlun_bf16_rtne", False)


# ---- the casts themselves ----------------------------------------------------


@triton.jit
def _casts(src, implicit, explicit, rtne, back, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src + offs, mask=mask)
    tl.store(implicit + offs, x, mask=mask)  # the store casts fp32 -> bf16
    y = x.to(tl.bfloat16)
    tl.store(explicit + offs, y, mask=mask)
    tl.store(rtne + offs, x.to(tl.bfloat16, fp_downcast_rounding="rtne"), mask=mask)
    tl.store(back + offs, y.to(tl.float32), mask=mask)


def _special_values() -> torch.Tensor:
    bits = [
        0x3F808000,  # 1 + half a bf16 ulp: a tie, even below -> 0x3f80
        0x3F818000,  # tie, odd below -> up to 0x3f82
        0x3F808001,  # just above a tie -> up
        0x3F807FFF,  # just below a tie -> down
        0x3FFFFFFF,  # carries into the exponent -> 2.0
        0x7F7FFFFF,  # largest fp32 -> overflows to inf, as torch
        0x7F7F7FFF,  # below it, stays finite
        0x00018000,  # subnormal tie (odd below) -> up
        0x00008000,  # smallest-subnormal tie (even 0 below) -> 0
        0x807FFFFF,  # negative subnormal, rounds up in magnitude
        0x7F800000, 0xFF800000,  # inf, -inf
        0x7FC00000, 0x7F800001, 0xFFC12345,  # NaNs (quiet, signalling, negative)
        0x00000000, 0x80000000,  # +0, -0
        0xBF80C000, 0xC2F6E979,  # negative tie (odd below), -123.456
    ]
    values = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in bits], dtype=torch.int32).view(torch.float32)
    gen = torch.Generator().manual_seed(0)
    rand = torch.randn(4096, generator=gen) * torch.exp2(torch.randint(-30, 30, (4096,), generator=gen).float())
    return torch.cat([values, rand])


def test_casts_round_to_nearest_even_bitwise():
    x = _special_values().to(DEVICE)
    n = x.numel()
    outs = [torch.empty(n, dtype=BF16, device=DEVICE) for _ in range(3)]
    back = torch.empty(n, dtype=torch.float32, device=DEVICE)
    _casts[(1,)](x, *outs, back, n, BLOCK=triton.next_power_of_2(n))
    want = x.cpu().to(BF16)
    nan = want.isnan()
    for name, out in zip(("store", ".to(bfloat16)", "rtne"), outs):
        got = out.cpu()
        assert torch.equal(got.isnan(), nan), name
        same = got.view(torch.int16) == want.view(torch.int16)
        assert bool(same[~nan].all()), f"{name}: {int((~same[~nan]).sum())} of {n} values differ from torch's cast"
    assert torch.equal(back.cpu()[~nan], want.float()[~nan])  # bf16 -> fp32 is exact
    assert bool(back.cpu()[nan].isnan().all())


# ---- every op with a bf16 output ---------------------------------------------


def _rand(*shape, seed, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * scale).to(BF16).to(DEVICE)


def _rms64(x, weight, eps):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def test_rms_norm():
    x, w = _rand(64, 576, seed=1), _rand(576, seed=2)
    assert_rounded(ops.rms_norm(x, w, 1e-5), _rms64(x.cpu(), w.cpu(), 1e-5), 16, "rms_norm")


def test_fused_add_rms_norm():
    x, res, w = _rand(64, 576, seed=3), _rand(64, 576, seed=4, scale=4.0), _rand(576, seed=5)
    total = x.cpu().double() + res.cpu().double()
    out = ops.fused_add_rms_norm(x, res, w, 1e-5)
    assert_rounded(res, total, 0, "fused_add_rms_norm residual")  # one fp32 add of two bf16: exact
    assert_rounded(out, _rms64(total, w.cpu(), 1e-5), 16, "fused_add_rms_norm out")


@pytest.mark.parametrize("op", ["silu_and_mul", "gelu_and_mul", "gelu_and_mul_tanh"])
def test_activations(op):
    x = _rand(64, 2 * 1536, seed=6, scale=2.0)
    gate, up = x.cpu().double().chunk(2, dim=-1)
    if op == "silu_and_mul":
        out, act = ops.silu_and_mul(x), gate * torch.sigmoid(gate)
    elif op == "gelu_and_mul":
        out, act = ops.gelu_and_mul(x), 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2)))
    else:
        inner = math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)
        out, act = ops.gelu_and_mul(x, "tanh"), 0.5 * gate * (1 + torch.tanh(inner))
    # gelu's 1 + erf (1 + tanh) cancels for negative gates: the fp32 formula
    # (SGLang's and torch's) loses relative accuracy there, not the rounding.
    where = None if op == "silu_and_mul" else (gate >= -1.0).expand_as(up)
    assert_rounded(out, act * up, 64, op, where)


def test_logit_softcap():
    logits = _rand(8, 4096, seed=7, scale=20.0)
    exact = 30.0 * torch.tanh(logits.cpu().double() / 30.0)
    assert_rounded(ops.logit_softcap(logits, 30.0), exact, 64, "logit_softcap")


@pytest.mark.parametrize("is_neox", [True, False])
def test_rotary_embedding(is_neox):
    tokens, q_heads, kv_heads, head = 16, 9, 3, 64
    q, k = _rand(tokens, q_heads * head, seed=8), _rand(tokens, kv_heads, head, seed=9)
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, head, 2, dtype=torch.float64) / head)
    angles = torch.outer(torch.arange(128, dtype=torch.float64), inv_freq)
    cache = torch.cat([angles.cos(), angles.sin()], dim=-1).float()
    positions = torch.randint(0, 128, (tokens,), generator=torch.Generator().manual_seed(10))

    def rotate(x):
        x = x.cpu().double().reshape(tokens, -1, head)
        cos, sin = cache.double()[positions].chunk(2, dim=-1)
        cos, sin = cos[:, None], sin[:, None]
        a, b = (x[..., : head // 2], x[..., head // 2 :]) if is_neox else (x[..., 0::2], x[..., 1::2])
        ra, rb = a * cos - b * sin, b * cos + a * sin
        return torch.cat([ra, rb], -1) if is_neox else torch.stack([ra, rb], -1).flatten(-2)

    want_q, want_k = rotate(q), rotate(k)
    ops.rotary_embedding(positions.to(DEVICE), q, k, head, cache.to(DEVICE), is_neox)
    assert_rounded(q, want_q, 4, "rotary_embedding query")
    assert_rounded(k, want_k, 4, "rotary_embedding key")


def test_store_kv():
    k, v = _rand(32, 3, 64, seed=11), _rand(32, 3, 64, seed=12)
    loc = torch.randperm(64, generator=torch.Generator().manual_seed(13))[:32].to(DEVICE)
    kb, vb = torch.zeros(64, 3, 64, dtype=BF16, device=DEVICE), torch.zeros(64, 3, 64, dtype=BF16, device=DEVICE)
    ops.store_kv(k, v, kb, vb, loc)
    assert_rounded(kb[loc], k.double(), 0, "store_kv k")
    assert_rounded(vb[loc], v.double(), 0, "store_kv v")


def _attend64(q, k, v, sm_scale, causal_offset):
    """q [m, Hq, D], k/v [n, Hkv, D]; query i sees keys 0 .. causal_offset + i.
    Returns the output and the size of its terms (sum of p * |v|)."""
    group = q.shape[1] // k.shape[1]
    qf, kf, vf = (t.cpu().double() for t in (q, k, v))
    kf, vf = kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1)
    scores = torch.einsum("mhd,nhd->hmn", qf, kf) * sm_scale
    visible = torch.arange(k.shape[0])[None, :] <= causal_offset + torch.arange(q.shape[0])[:, None]
    probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1)
    return torch.einsum("hmn,nhd->mhd", probs, vf), torch.einsum("hmn,nhd->mhd", probs, vf.abs())


def test_decode_attention():
    d = decode_batch([37, 70, 5], q_heads=9, kv_heads=3, head_dim=64, dtype=BF16, device=DEVICE, seed=14)
    out = ops.decode_attention(*d.args())
    p = d.pool
    want, size = (torch.cat(t) for t in zip(*[
        _attend64(d.q[b : b + 1], p.k_buffer[s], p.v_buffer[s], d.sm_scale, len(s) - 1)
        for b, s in enumerate(p.kv_indices[p.kv_indptr[i] : p.kv_indptr[i + 1]].long() for i in range(3))
    ]))  # fmt: skip
    assert_rounded(out, want, 64, "decode_attention", scale=size)


def test_extend_attention():
    e = extend_batch([20, 0, 9], [7, 12, 1], q_heads=9, kv_heads=3, head_dim=64, dtype=BF16, device=DEVICE, seed=15)
    out = ops.extend_attention(*e.args())
    p, rows, start = e.pool, [], 0
    for b, n in enumerate(e.extend_lens):
        s = p.kv_indices[p.kv_indptr[b] : p.kv_indptr[b + 1]].long()
        k = torch.cat([p.k_buffer[s], e.k_extend[start : start + n]])
        v = torch.cat([p.v_buffer[s], e.v_extend[start : start + n]])
        rows.append(_attend64(e.q_extend[start : start + n], k, v, e.sm_scale, len(s)))
        start += n
    want, size = (torch.cat(t) for t in zip(*rows))
    assert_rounded(out, want, 64, "extend_attention", scale=size)
