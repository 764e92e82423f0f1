"""Small device functions shared by the decode and extend kernels."""

import triton
import triton.language as tl


@triton.jit
def soft_cap(s, CAP: tl.constexpr):
    """cap * tanh(s / cap), written with tl.exp (no tanh in the portable subset):
    tanh(x) = 1 - 2 / (exp(2x) + 1), exact at both saturations (exp -> inf or 0)."""
    x = s / CAP
    return CAP * (1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0))


@triton.jit
def scores(q, k_t, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """q [M, D] times k_t [D, N] -> [M, N] in fp32.

    dot: tensor cores in the operands' dtype (fp32 operands when DOT_FP32,
    with ieee precision so fp32 inputs are not silently rounded to tf32).
    sum: broadcast product [M, D, N] reduced over D in fp32."""
    if USE_DOT:
        if DOT_FP32:
            return tl.dot(q.to(tl.float32), k_t.to(tl.float32), input_precision="ieee")
        else:
            return tl.dot(q, k_t)
    else:
        return tl.sum(q.to(tl.float32)[:, :, None] * k_t.to(tl.float32)[None, :, :], axis=1)


@triton.jit
def weighted_values(p, v, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """p [M, N] (fp32 probabilities) times v [N, Dv] -> [M, Dv] in fp32.

    dot: p is rounded to v's dtype for the tensor cores (the usual flash
    attention trade: one rounding of each weight, fp32 accumulation)."""
    if USE_DOT:
        if DOT_FP32:
            return tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            return tl.dot(p.to(v.dtype), v)
    else:
        return tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)


@triton.jit
def capped_scores(q, k_t, sm_scale, LOGIT_CAP: tl.constexpr, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """sm_scale * q k^T, soft-capped when LOGIT_CAP > 0 (Gemma-2 style)."""
    s = scores(q, k_t, USE_DOT, DOT_FP32) * sm_scale
    if LOGIT_CAP > 0:
        s = soft_cap(s, LOGIT_CAP)
    return s


@triton.jit
def load_k_transposed(ptr, rows, row_stride, head_offset, offs_d, d_mask, n_mask):
    """K^T tile [D, N] of the int64 `rows` (pool slots or token ids) of one kv
    head, zero outside the masks: Kunlun's masked loads may ignore `other=`."""
    mask = d_mask[:, None] & n_mask[None, :]
    k_t = tl.load(ptr + rows[None, :] * row_stride + head_offset + offs_d[:, None], mask=mask)
    return tl.where(mask, k_t, 0.0)


@triton.jit
def load_v(ptr, rows, row_stride, head_offset, offs_dv, dv_mask, n_mask):
    """V tile [N, Dv] of the int64 `rows` of one kv head, zero outside the masks."""
    mask = n_mask[:, None] & dv_mask[None, :]
    v = tl.load(ptr + rows[:, None] * row_stride + head_offset + offs_dv[None, :], mask=mask)
    return tl.where(mask, v, 0.0)


# Running max starts finite: a row whose every key so far is masked keeps
# m = NO_SCORE, so exp(-inf - m) = 0 and the rescale exp(m - m) = 1, never
# the NaN of exp(-inf - -inf).
NO_SCORE = tl.constexpr(-1.0e30)


@triton.jit
def online_softmax_update(s, v, m_i, l_i, acc, USE_DOT: tl.constexpr, DOT_FP32: tl.constexpr):
    """Fold one tile of scores s [M, N] (masked keys at -inf) and values
    v [N, Dv] into the running max m_i [M], sum l_i [M] and unnormalised
    output acc [M, Dv]:

        m' = max(m, max_j s_j);  l' = l e^(m - m') + sum_j e^(s_j - m')
        acc' = acc e^(m - m') + sum_j e^(s_j - m') v_j
    """
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_new = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + weighted_values(p, v, USE_DOT, DOT_FP32)
    return m_new, l_new, acc
