"""Device functions the MoE kernels share: masked loads that give zeros on
every target, one tile of a matrix product in either formulation, and the
gated activations."""

import triton
import triton.language as tl

SQRT_HALF = tl.constexpr(0.7071067811865476)
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)


@triton.jit
def load_or_zero(ptrs, mask, ZERO_AFTER_LOAD: tl.constexpr):
    """tl.load with zeros where `mask` is off.

    ZERO_AFTER_LOAD (Kunlun: masked loads may ignore ``other=``) zeroes with
    tl.where after the load; elsewhere ``other=0`` does it inside the load,
    so tl.dot operands go straight from memory to the tensor cores."""
    if ZERO_AFTER_LOAD:
        return tl.where(mask, tl.load(ptrs, mask=mask), 0)
    else:
        return tl.load(ptrs, mask=mask, other=0)


@triton.jit
def tile_matmul(a, b, acc, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """acc [M, N] + a [M, K] @ b [K, N], accumulated in fp32.

    dot: tensor cores in the operands' dtype (DOT_FP32: fp32 operands with
    ieee precision, for fp32 inputs and where bf16 dot is wrong). sum: the
    broadcast product [M, K, N] reduced over K (Kunlun's default)."""
    if USE_DOT:
        if DOT_FP32:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            return tl.dot(a, b, acc)
    else:
        return acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)


@triton.jit
def _sigmoid(z):
    e = tl.exp(-tl.abs(z))  # exp of a non-positive number: never overflows
    return tl.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def gated_activation(gate, up, ACTIVATION: tl.constexpr, ALPHA: tl.constexpr, LIMIT: tl.constexpr):
    """act(gate) * up in fp32. ACTIVATION 0: silu(g) = g / (1 + exp(-g)),
    1: exact gelu(g) = g / 2 * (1 + erf(g / sqrt(2))),
    2: gelu_tanh(g) = g / 2 * (1 + tanh(sqrt(2 / pi) * (g + 0.044715 g^3))),
    3: gpt-oss's clamped SwiGLU (SGLang's gemm1_alpha + gemm1_limit):
       g = min(g, LIMIT), u = clamp(up, -LIMIT, LIMIT), g sigmoid(ALPHA g) (u + 1),
    4: SGLang's limit-only clamp (gemm1_limit without gemm1_alpha):
       min(silu(g), LIMIT) clamp(up, -LIMIT, LIMIT)."""
    if ACTIVATION == 0:
        return gate * _sigmoid(gate) * up
    elif ACTIVATION == 1:
        return 0.5 * gate * (1.0 + tl.erf(gate * SQRT_HALF)) * up
    elif ACTIVATION == 2:
        # tanh(|z|) = (1 - e) / (1 + e), e = exp(-2|z|): no overflow, no tanh needed
        z = SQRT_2_OVER_PI * (gate + 0.044715 * gate * gate * gate)
        e = tl.exp(-2.0 * tl.abs(z))
        t = (1.0 - e) / (1.0 + e)
        return 0.5 * gate * (1.0 + tl.where(z >= 0, t, -t)) * up
    elif ACTIVATION == 3:
        g = tl.minimum(gate, LIMIT)
        u = tl.minimum(tl.maximum(up, -LIMIT), LIMIT)
        return g * _sigmoid(ALPHA * g) * (u + 1.0)
    else:
        u = tl.minimum(tl.maximum(up, -LIMIT), LIMIT)
        return tl.minimum(gate * _sigmoid(gate), LIMIT) * u


def dot_block(size: int, use_dot: bool) -> int:
    """A power-of-two tile no smaller than tl.dot's 16 when dot is used."""
    block = triton.next_power_of_2(max(int(size), 1))
    return max(block, 16) if use_dot else block
