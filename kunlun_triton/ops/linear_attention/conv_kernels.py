"""Causal depthwise conv1d kernels (the short convolution of gated-delta-net
layers), over a ragged prefill batch and for one decode token.

For channel d of a request whose inputs are x_0 .. x_{L-1}, with the conv
state s (the request's last WIDTH - 1 inputs before this call, oldest first)
prepended, so that x_p = s[WIDTH - 1 + p] for -(WIDTH - 1) <= p < 0:

    y_t[d] = act(bias[d] + sum_{j=0}^{WIDTH-1} weight[d, j] * x_{t - (WIDTH - 1) + j}[d])

act is SiLU (y * sigmoid(y)) or the identity; the state written back is
x_{L - (WIDTH - 1)} .. x_{L - 1} (from the old state where L < WIDTH - 1).
A request without an initial state (``has_initial_state[n]`` false) starts
from zeros; a request whose slot is negative (SGLang's padding slot -1)
starts from zeros and writes no state.

The kernels hold the window as three [BLOCK_D] vectors (WIDTH <= 4; a
narrower kernel leaves the oldest taps at weight 0) and slide it one token
at a time, so each input element is read once per program and every output
element is written once. The state of a slot is read and written by one
program (the request's first token block), and the values it writes are the
registers it read (or rows of x), so the write cannot overtake a read of the
same element by another thread; that needs a layout without replicated
lanes: BLOCK_D >= 32 * num_warps (the launcher's configs keep it).
"""

import triton
import triton.language as tl

from ..loads import masked_load


@triton.jit
def _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, J: tl.constexpr, WIDTH: tl.constexpr):
    """weight[d, WIDTH - 4 + J] as fp32 (0 where the kernel is narrower than 4)."""
    if WIDTH - 4 + J >= 0:
        return tl.load(weight_ptr + d * w_stride_d + (WIDTH - 4 + J) * w_stride_c, mask=dmask).to(tl.float32)
    else:
        return tl.zeros(d.shape, tl.float32)


@triton.jit
def _state_col(state_ptrs, use_state, dmask, st_stride_c, COL: tl.constexpr, WIDTH: tl.constexpr,
               LOAD_IGNORES_OTHER: tl.constexpr):
    """Column COL - 4 + WIDTH of the state (window position COL), 0 where it does not exist."""
    if COL - 3 + WIDTH - 1 >= 0:
        return masked_load(state_ptrs + (COL - 3 + WIDTH - 1) * st_stride_c, use_state, 0.0,
                           LOAD_IGNORES_OTHER).to(tl.float32)
    else:
        return tl.zeros(dmask.shape, tl.float32)


@triton.jit
def _activate(y, SILU: tl.constexpr):
    if SILU:
        return y / (1.0 + tl.exp(-y))
    else:
        return y


@triton.jit(do_not_specialize=["n_requests"])
def conv1d_prefill_kernel(
    x_ptr, weight_ptr, bias_ptr, state_ptr, query_start_loc_ptr, slots_ptr, has_init_ptr, out_ptr,
    n_requests, x_stride, out_stride, w_stride_d, w_stride_c, st_stride_slot, st_stride_d, st_stride_c,
    DIM: tl.constexpr, WIDTH: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_INIT_FLAGS: tl.constexpr, SILU: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr,
):
    """Program (channel block, token block, request): outputs of BLOCK_T tokens
    of one request; token block 0 also writes the request's final state."""
    pid_d, pid_t, n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(query_start_loc_ptr + n).to(tl.int64)
    length = tl.load(query_start_loc_ptr + n + 1).to(tl.int64) - start
    t0 = pid_t * BLOCK_T
    if t0 < length:
        d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        dmask = d < DIM
        slot = tl.load(slots_ptr + n).to(tl.int64)
        # per-lane masks: a scalar condition in a mask trips the interpreter (Triton 3.9)
        use_state = dmask & ((d * 0 + slot) >= 0)
        if HAS_INIT_FLAGS:
            use_state = use_state & ((d * 0 + tl.load(has_init_ptr + n).to(tl.int32)) != 0)
        w0 = _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, 0, WIDTH)
        w1 = _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, 1, WIDTH)
        w2 = _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, 2, WIDTH)
        w3 = _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, 3, WIDTH)
        if HAS_BIAS:
            bias = tl.load(bias_ptr + d, mask=dmask).to(tl.float32)
        else:
            bias = tl.zeros([BLOCK_D], tl.float32)
        x_rows = x_ptr + start * x_stride + d
        state_ptrs = state_ptr + tl.maximum(slot, 0) * st_stride_slot + d * st_stride_d
        if pid_t == 0:  # the window before token 0 is the state
            c0 = _state_col(state_ptrs, use_state, dmask, st_stride_c, 0, WIDTH, LOAD_IGNORES_OTHER)
            c1 = _state_col(state_ptrs, use_state, dmask, st_stride_c, 1, WIDTH, LOAD_IGNORES_OTHER)
            c2 = _state_col(state_ptrs, use_state, dmask, st_stride_c, 2, WIDTH, LOAD_IGNORES_OTHER)
        else:  # BLOCK_T >= 3: the window is rows of x
            c0 = tl.load(x_rows + (t0 - 3) * x_stride, mask=dmask).to(tl.float32)
            c1 = tl.load(x_rows + (t0 - 2) * x_stride, mask=dmask).to(tl.float32)
            c2 = tl.load(x_rows + (t0 - 1) * x_stride, mask=dmask).to(tl.float32)
        old0, old1, old2 = c0, c1, c2
        t_end = tl.minimum(t0 + BLOCK_T, length)
        for t in range(t0, t_end):
            xt = tl.load(x_rows + t * x_stride, mask=dmask).to(tl.float32)
            y = _activate(bias + w0 * c0 + w1 * c1 + w2 * c2 + w3 * xt, SILU)
            tl.store(out_ptr + (start + t) * out_stride + d, y.to(out_ptr.dtype.element_ty), mask=dmask)
            c0, c1, c2 = c1, c2, xt
        if (pid_t == 0) & (slot >= 0):
            # state column j holds input position p = length - (WIDTH - 1) + j (>= -3)
            for j in tl.static_range(WIDTH - 1):
                p = length - (WIDTH - 1) + j
                from_x = masked_load(x_rows + tl.maximum(p, 0) * x_stride, dmask & ((d * 0 + p) >= 0), 0.0,
                                     LOAD_IGNORES_OTHER).to(tl.float32)
                kept = tl.where(p == -3, old0, tl.where(p == -2, old1, old2))
                value = tl.where(p >= 0, from_x, kept)
                tl.store(state_ptrs + j * st_stride_c, value.to(state_ptr.dtype.element_ty), mask=dmask)


@triton.jit
def _store_window(state_ptrs, c1, c2, xt, dmask, st_stride_c, WIDTH: tl.constexpr):
    """The new state: window positions 1..3 and x, right-aligned to WIDTH - 1 columns."""
    dtype = state_ptrs.dtype.element_ty
    if WIDTH >= 4:
        tl.store(state_ptrs + (WIDTH - 4) * st_stride_c, c1.to(dtype), mask=dmask)
    if WIDTH >= 3:
        tl.store(state_ptrs + (WIDTH - 3) * st_stride_c, c2.to(dtype), mask=dmask)
    tl.store(state_ptrs + (WIDTH - 2) * st_stride_c, xt.to(dtype), mask=dmask)


@triton.jit(do_not_specialize=["n_requests"])
def conv1d_update_kernel(
    x_ptr, weight_ptr, bias_ptr, state_ptr, slots_ptr, track_slots_ptr, out_ptr,
    n_requests, x_stride, out_stride, w_stride_d, w_stride_c, st_stride_slot, st_stride_d, st_stride_c,
    DIM: tl.constexpr, WIDTH: tl.constexpr, BLOCK_D: tl.constexpr, HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr, LOAD_IGNORES_OTHER: tl.constexpr, HAS_TRACK: tl.constexpr,
):
    """Program (channel block, request): one decode token; the state rolls left by one. HAS_TRACK:
    the new window also goes to slot track_slots[n] where that is >= 0 (SGLang's prefix-cache
    snapshot)."""
    pid_d, n = tl.program_id(0), tl.program_id(1)
    d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    dmask = d < DIM
    slot = tl.load(slots_ptr + n).to(tl.int64)
    use_state = dmask & ((d * 0 + slot) >= 0)
    state_ptrs = state_ptr + tl.maximum(slot, 0) * st_stride_slot + d * st_stride_d
    c0 = _state_col(state_ptrs, use_state, dmask, st_stride_c, 0, WIDTH, LOAD_IGNORES_OTHER)
    c1 = _state_col(state_ptrs, use_state, dmask, st_stride_c, 1, WIDTH, LOAD_IGNORES_OTHER)
    c2 = _state_col(state_ptrs, use_state, dmask, st_stride_c, 2, WIDTH, LOAD_IGNORES_OTHER)
    xt = tl.load(x_ptr + n * x_stride + d, mask=dmask).to(tl.float32)
    w0 = _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, 0, WIDTH)
    w1 = _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, 1, WIDTH)
    w2 = _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, 2, WIDTH)
    w3 = _tap(weight_ptr, d, dmask, w_stride_d, w_stride_c, 3, WIDTH)
    y = w0 * c0 + w1 * c1 + w2 * c2 + w3 * xt
    if HAS_BIAS:
        y += tl.load(bias_ptr + d, mask=dmask).to(tl.float32)
    y = _activate(y, SILU)
    tl.store(out_ptr + n * out_stride + d, y.to(out_ptr.dtype.element_ty), mask=dmask)
    if slot >= 0:
        _store_window(state_ptrs, c1, c2, xt, dmask, st_stride_c, WIDTH)
    if HAS_TRACK:
        track = tl.load(track_slots_ptr + n).to(tl.int64)
        if track >= 0:
            _store_window(state_ptr + track * st_stride_slot + d * st_stride_d, c1, c2, xt, dmask, st_stride_c, WIDTH)

