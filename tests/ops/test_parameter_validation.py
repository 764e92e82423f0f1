"""Every scalar argument of the ops (eps, sm_scale, logit_cap, sliding_window,
num_kv_splits, max_len_extend, formulation, ...) refuses NaN, out-of-range,
wrong-type and unknown values with an error naming it, leaves every output
untouched when it does, and takes numpy scalars like Python numbers.
"""

import numpy as np
import pytest
import torch

from strategies import DEVICE

from kunlun_triton.ops import (
    decode_attention,
    extend_attention,
    fused_add_rms_norm,
    fused_experts,
    moe_topk,
    rms_norm,
    rotary_embedding,
)
from kunlun_triton.introspect.paged import decode_batch, extend_batch


def _rms_norm(**kw):
    x, w = torch.randn(3, 16, device=DEVICE), torch.rand(16, device=DEVICE)
    return (lambda: rms_norm(x, w, **kw)), [x]


def _fused_add_rms_norm(**kw):
    x, residual, w = torch.randn(3, 16, device=DEVICE), torch.randn(3, 16, device=DEVICE), torch.rand(16, device=DEVICE)
    out = torch.zeros_like(x)
    return (lambda: fused_add_rms_norm(x, residual, w, out=out, **kw)), [x, residual, out]


def _decode(**kw):
    b = decode_batch([5, 3], q_heads=4, kv_heads=2, head_dim=16, dtype=torch.float16, device=DEVICE)
    args = dict(zip(["q", "k_buffer", "v_buffer", "o", "kv_indptr", "kv_indices", "sm_scale"], b.args()))
    args.update(kw)
    return (lambda: decode_attention(**args)), [args["o"], args["q"], args["k_buffer"]]


def _extend(**kw):
    b = extend_batch([4, 2], [3, 5], q_heads=4, kv_heads=2, head_dim=16, dtype=torch.float16, device=DEVICE)
    names = ["q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr",
             "kv_indices", "max_len_extend", "sm_scale"]  # fmt: skip
    args = dict(zip(names, b.args()))
    args.update(kw)
    return (lambda: extend_attention(**args)), [args["o_extend"], args["k_buffer"]]


def _fused_experts(**kw):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 16, generator=gen).to(DEVICE)
    w13, w2 = torch.randn(4, 16, 16, generator=gen).to(DEVICE), torch.randn(4, 16, 8, generator=gen).to(DEVICE)
    weights, ids = torch.rand(3, 2, device=DEVICE), torch.tensor([[0, 1], [2, 3], [1, 0]], device=DEVICE)
    return (lambda: fused_experts(x, w13, w2, weights, ids, **kw)), [x, w13]


def _moe_topk(**kw):
    logits = torch.randn(3, 8, device=DEVICE)
    args = dict(top_k=2) | kw
    return (lambda: moe_topk(logits, **args)), [logits]


def _rope(**kw):
    args = dict(head_size=16) | kw
    positions, q, k = torch.arange(3, device=DEVICE), torch.randn(3, 32, device=DEVICE), torch.randn(3, 16, device=DEVICE)
    cache = torch.randn(8, 16, device=DEVICE)
    return (lambda: rotary_embedding(positions, q, k, args["head_size"], cache, True)), [q, k]


NAN, INF = float("nan"), float("inf")
BAD_NUMBER = [NAN, INF, "1", None, [1.0], True]
BAD = {  # (op, argument): values it must refuse
    (_rms_norm, "eps"): [-1e-6, *BAD_NUMBER, np.float32("nan")],
    (_fused_add_rms_norm, "eps"): [-1.0, *BAD_NUMBER],
    (_decode, "sm_scale"): [0.0, -0.1, *BAD_NUMBER, np.float64(-1)],
    (_decode, "logit_cap"): [-1.0, NAN, INF, "30", True, np.float32("nan")],
    (_decode, "sliding_window"): [-2, 1.5, NAN, "4", True, np.float64(4.0)],
    (_decode, "num_kv_splits"): [0, -1, 2.5, NAN, "2", True],
    (_decode, "formulation"): ["tensor_core", "DOT", 1, ["dot"]],
    (_decode, "k_scale"): [0.0, -1.0, NAN, INF, "1", [1.0], True, 2.0],  # 2.0: the pool is not fp8
    (_decode, "v_scale"): [-0.5, NAN, "1"],
    (_extend, "sm_scale"): [0.0, -1.0, *BAD_NUMBER],
    (_extend, "logit_cap"): [-0.5, NAN, "x"],
    (_extend, "sliding_window"): [-5, 2.0, "1"],
    (_extend, "max_len_extend"): [-1, 2.5, NAN, "8", None, True, 4],  # 4: a request extends by 5
    (_extend, "formulation"): ["tensor_core", 0],
    (_extend, "k_scale"): [0.0, INF, "x", 0.5],  # 0.5: the pool is not fp8
    (_extend, "v_scale"): [-1.0, NAN, True],
    (_fused_experts, "formulation"): ["tensor_core", 2],
    (_fused_experts, "activation"): ["relu", None],
    (_moe_topk, "top_k"): [0, -1, 2.5, NAN, "2", 9],
    (_moe_topk, "routed_scaling_factor"): [0.0, -1.0, NAN, INF, "2"],
    (_moe_topk, "scoring"): ["softplus", None],
    (_rope, "head_size"): [0, -16, 16.0, NAN, "16"],
}
CASES = [(make, name, value) for (make, name), values in BAD.items() for value in values]


@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("make,name,value", CASES,
                         ids=[f"{m.__name__[1:]}-{n}-{v!r}" for m, n, v in CASES])  # fmt: skip
def test_bad_value_is_refused_by_name_and_changes_nothing(make, name, value, backend, monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", backend)
    call, outputs = make(**{name: value})
    before = [t.clone() for t in outputs]
    with pytest.raises((TypeError, ValueError), match=name):
        call()
    for t, b in zip(outputs, before):
        assert torch.equal(t.nan_to_num(), b.nan_to_num()), f"a refused call changed a tensor ({name}={value!r})"


def _result(make, **kw):
    torch.manual_seed(0)  # the same inputs for both calls
    call, outputs = make(**kw)
    result = call()
    return [t.clone() for t in (result if isinstance(result, tuple) else (result,)) if t is not None]


NUMPY = [
    (_rms_norm, dict(eps=1e-5), dict(eps=np.float32(1e-5))),
    (_fused_add_rms_norm, dict(eps=0), dict(eps=np.int64(0))),
    (_decode, dict(sm_scale=0.25, logit_cap=30.0, sliding_window=2, num_kv_splits=2, formulation="sum"),
     dict(sm_scale=np.float32(0.25), logit_cap=np.float64(30.0), sliding_window=np.int64(2),
          num_kv_splits=np.int32(2), formulation=np.str_("sum"))),
    (_extend, dict(max_len_extend=5, sm_scale=0.25, sliding_window=3),
     dict(max_len_extend=np.int64(5), sm_scale=np.float16(0.25), sliding_window=np.int32(3))),
    (_moe_topk, dict(top_k=2, routed_scaling_factor=2.5), dict(top_k=np.int64(2), routed_scaling_factor=np.float32(2.5))),
    (_rope, dict(head_size=16), dict(head_size=np.int32(16))),
]  # fmt: skip


@pytest.mark.parametrize("make,plain,numpy_kw", NUMPY, ids=[m.__name__[1:] for m, _, _ in NUMPY])
def test_numpy_scalars_work_like_python_numbers(make, plain, numpy_kw):
    expected = _result(make, **plain)
    got = _result(make, **numpy_kw)
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g, e), "the same call with numpy scalars must give the same result"


def test_rows_overlap_agrees_with_the_sets_of_addresses_they_touch():
    """`validation.rows_overlap` (used to refuse in-place outputs that share
    memory) against the oracle: the byte addresses each view covers."""
    import itertools

    from kunlun_triton.ops.validation import rows_overlap

    def addresses(t):
        offs = torch.zeros((), dtype=torch.int64)
        for size, stride in zip(t.shape, t.stride()):
            offs = offs[..., None] + torch.arange(size) * stride
        base = t.data_ptr()
        return {base + int(o) * t.element_size() + b for o in offs.flatten() for b in range(t.element_size())}

    buf = torch.zeros(6, 12)
    views = [buf, buf[:, :4], buf[:, 4:8], buf[:, 3:5], buf[1:, :4], buf[:-1, 8:], buf[2:4], buf[:, 0], buf[:, 11],
             buf.view(-1)[5:30], buf.view(-1)[::3], buf.view(-1)[1::3], buf[::2, :6], buf[1::2, :6], buf[4:, 2:3]]
    for a, b in itertools.product(views, repeat=2):
        exact = bool(addresses(a) & addresses(b))
        got = rows_overlap(a, b)
        # layouts it does not model are compared by start only: never a false alarm
        assert got == exact or (not got and exact and not _modelled(a, b)), (a.shape, a.stride(), b.shape, b.stride())


def _modelled(a, b):
    rows_contiguous = all(t.dim() == 1 or t[0].is_contiguous() for t in (a, b))
    same_stride = a.stride(0) * a.element_size() == b.stride(0) * b.element_size() or 1 in (a.shape[0], b.shape[0])
    return rows_contiguous and same_stride
