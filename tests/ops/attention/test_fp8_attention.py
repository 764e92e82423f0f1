"""decode_attention / extend_attention over an fp8 KV pool against the torch
reference fed the dequantized pool (torch's own float8 decode, times the
scales), and store_kv -> attention round trips."""

import dataclasses
import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import DEVICE

from kunlun_triton.ops import decode_attention, extend_attention, store_kv
from kunlun_triton.ops.attention import reference
from kunlun_triton.testing import assert_close
from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.runtime.config import clear_config_cache

# the modules (the package exports the functions under the same names)
decode_module = importlib.import_module("kunlun_triton.ops.attention.decode_attention")
extend_module = importlib.import_module("kunlun_triton.ops.attention.extend_attention")
fp8_module = importlib.import_module("kunlun_triton.ops.attention.fp8")

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FORMULATIONS = ("dot", "sum")


def quantize(buffer, fp8_dtype, scale):
    """A pool's values as fp8 bytes of value / scale (torch's cast)."""
    return (buffer.float().cpu() / scale).to(fp8_dtype).to(DEVICE)


def fp8_pool(pool, fp8_dtype, k_scale, v_scale, mla_v_dim=None):
    pool.k_buffer = quantize(pool.k_buffer, fp8_dtype, k_scale)
    # MLA: V is the first v_dim values of K's rows, a strided view
    pool.v_buffer = pool.k_buffer[..., :mla_v_dim] if mla_v_dim else quantize(pool.v_buffer, fp8_dtype, v_scale)
    return pool


@pytest.mark.parametrize("formulation", FORMULATIONS)
@settings(max_examples=6)
@given(
    fp8_dtype=st.sampled_from(FP8_DTYPES),
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32]),
    lens=st.lists(st.integers(0, 70), min_size=1, max_size=3),
    heads=st.sampled_from([(4, 2), (2, 2), (8, 1)]),
    head_dim=st.sampled_from([32, 80]),
    scales=st.sampled_from([(1.0, 1.0), (0.05, 2.5)]),
    splits=st.sampled_from([None, 2]),
    seed=st.integers(0, 2**16),
)
def test_decode_fp8_pool_matches_dequantized_reference(formulation, fp8_dtype, dtype, lens, heads, head_dim, scales,
                                                       splits, seed):  # fmt: skip
    k_scale, v_scale = scales
    batch = decode_batch(lens, q_heads=heads[0], kv_heads=heads[1], head_dim=head_dim, dtype=dtype, seed=seed,
                         page_size=4, device=DEVICE)  # fmt: skip
    fp8_pool(batch.pool, fp8_dtype, k_scale, v_scale)
    args = batch.args()
    out = decode_attention(*args, num_kv_splits=splits, formulation=formulation, k_scale=k_scale, v_scale=v_scale)
    want = reference.decode_attention(*batch.args(), k_scale=k_scale, v_scale=v_scale)
    assert_close(out, want, scale=2, msg=f"lens {lens}")


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES)
def test_decode_fp8_mla_latent_pool(formulation, fp8_dtype):
    """MLA shape in small: one latent head of 64 + 16 (split head dim), V a view of K."""
    batch = decode_batch([17, 40], q_heads=8, kv_heads=1, head_dim=80, v_head_dim=64, dtype=torch.bfloat16, seed=2,
                         device=DEVICE)  # fmt: skip
    fp8_pool(batch.pool, fp8_dtype, 0.5, 0.5, mla_v_dim=64)
    out = decode_attention(*batch.args(), formulation=formulation, k_scale=0.5, v_scale=0.5)
    assert_close(out, reference.decode_attention(*batch.args(), k_scale=0.5, v_scale=0.5), scale=2)


@pytest.fixture
def nan_by_arithmetic(monkeypatch):
    """Launch plans as on gfx942 (`capabilities().fp8_nan_by_arithmetic`: e4m3's
    NaN code decoded without a compare, FP8_NAN_ARITH), run by the interpreter."""
    from kunlun_triton.runtime.capabilities import capabilities

    caps = dataclasses.replace(capabilities(), fp8_nan_by_arithmetic=True)
    monkeypatch.setattr(fp8_module, "capabilities", lambda target=None: caps)
    monkeypatch.setattr(fp8_module, "native_fp8", lambda target=None: False)  # the codec, on a GPU too
    clear_config_cache()
    yield
    monkeypatch.undo()
    clear_config_cache()


@pytest.mark.parametrize("runtime_unit", [0, 1])
@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES)
def test_target_decode_variants_match_the_reference(nan_by_arithmetic, fp8_dtype, runtime_unit):
    """The fp8 decode as gfx942 (NaN code by arithmetic, the unit at run time)
    and sm_90's MLA decode (the unit a constant) plan it gives the dequantized
    reference's answers: MLA decode and extend (V a view of K) and a GQA
    extend over a separate V pool, with K and V scales apart and a NaN code
    in the pool (e4m3's 0x7f / e5m2's 0x7d) reaching the rows that see it.
    (The interpreter's own plans take the compare and the run-time unit.)"""
    k_scale, v_scale = 0.1, 3.0
    config = {"FP8_RUNTIME_UNIT": runtime_unit}
    nan_byte = 0x7F if fp8_dtype == torch.float8_e4m3fn else 0x7D
    d = decode_batch([17, 40], q_heads=8, kv_heads=1, head_dim=80, v_head_dim=64, dtype=torch.bfloat16, seed=5,
                     device=DEVICE)  # fmt: skip
    fp8_pool(d.pool, fp8_dtype, k_scale, k_scale, mla_v_dim=64)
    d.pool.k_buffer.view(torch.uint8)[d.pool.slots(1)[9].long(), 0, 70] = nan_byte  # a rope value: request 1 only
    launch = decode_module._launch_plan(config, torch.bfloat16, 80, 64, 8, None, 0.0, 0, False, 1, True)
    named = _named(decode_module.decode_partial_kernel, launch.partial.constexprs)
    assert (named["FP8_NAN_ARITH"], named["FP8_RUNTIME_UNIT"]) == (True, bool(runtime_unit))
    out = decode_attention(*d.args(), num_kv_splits=2, k_scale=k_scale, v_scale=v_scale, config=config)
    assert out[1].isnan().all() and out[0].isfinite().all()
    assert_close(out, reference.decode_attention(*d.args(), k_scale=k_scale, v_scale=v_scale), scale=2)
    for mla in (True, False):
        e = extend_batch([23, 6], [9, 14], q_heads=4, kv_heads=1 if mla else 2, head_dim=80 if mla else 32,
                         v_head_dim=64 if mla else 32, dtype=torch.bfloat16, seed=6, device=DEVICE)  # fmt: skip
        if mla:
            e.v_extend = e.k_extend[..., :64]
        fp8_pool(e.pool, fp8_dtype, k_scale, v_scale, mla_v_dim=64 if mla else None)
        out = extend_attention(*e.args(), k_scale=k_scale, v_scale=v_scale, config=config)
        want = reference.extend_attention(*e.args(), k_scale=k_scale, v_scale=v_scale)
        assert_close(out, want, scale=2, msg=f"mla={mla}")
    _, extend_launch = extend_module._launch_plan(config, torch.bfloat16, 32, 32, 2, None, 0.0, 0, False, False, 1)
    named = _named(extend_module.extend_kernel, extend_launch.constexprs)
    assert (named["FP8_NAN_ARITH"], named["FP8_RUNTIME_UNIT"]) == (True, bool(runtime_unit))


@pytest.fixture
def native_conversion(monkeypatch):
    """Launch plans as on CUDA sm_89+ (`capabilities.native_fp8`: attention
    reads the pool's bytes as Triton's fp8 types and casts them, KV_FORMAT
    3 / 4), run by the interpreter's fp8 casts."""
    monkeypatch.setattr(fp8_module, "native_fp8", lambda target=None: True)
    clear_config_cache()
    yield
    monkeypatch.undo()
    clear_config_cache()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES)
def test_native_conversion_matches_the_reference(native_conversion, fp8_dtype, dtype):
    """The target's own fp8 conversion gives the dequantized reference's
    answers: GQA and MLA decode (split, so stage 1 runs) and extend, K and V
    scales apart. A NaN code (e4m3's 0x7f / e5m2's 0x7d) reaches the rows
    that see it on a GPU only: the interpreter's fp8 cast re-biases it as a
    number, where sm_89+'s cvt gives NaN as the codec does."""
    k_scale, v_scale = 0.1, 3.0
    for mla in (False, True):
        d = decode_batch([17, 40], q_heads=8, kv_heads=1 if mla else 2, head_dim=80 if mla else 32,
                         v_head_dim=64 if mla else 32, dtype=dtype, seed=5, device=DEVICE)  # fmt: skip
        fp8_pool(d.pool, fp8_dtype, k_scale, k_scale if mla else v_scale, mla_v_dim=64 if mla else None)
        nan_code = str(DEVICE) != "cpu"
        if nan_code:  # kv head 0 of request 1: the q heads of its group there, nothing else
            nan_byte = 0x7F if fp8_dtype == torch.float8_e4m3fn else 0x7D
            d.pool.k_buffer.view(torch.uint8)[d.pool.slots(1)[9].long(), 0, 3] = nan_byte
        scales = {"k_scale": k_scale, "v_scale": k_scale if mla else v_scale}
        fmt = 1 if fp8_dtype == torch.float8_e4m3fn else 2
        launch = decode_module._launch_plan(None, dtype, d.q.shape[2], d.pool.v_buffer.shape[2],
                                            8 // d.pool.k_buffer.shape[1], None, 0.0, 0, False, fmt, mla)  # fmt: skip
        assert _named(decode_module.decode_partial_kernel, launch.partial.constexprs)["KV_FORMAT"] in (3, 4)
        out = decode_attention(*d.args(), num_kv_splits=2, **scales)
        if nan_code:
            group = 8 // d.pool.k_buffer.shape[1]
            assert out[1, :group].isnan().all() and out[1, group:].isfinite().all() and out[0].isfinite().all()
        assert_close(out, reference.decode_attention(*d.args(), **scales), scale=2, msg=f"decode mla={mla}")
        e = extend_batch([23, 6], [9, 14], q_heads=4, kv_heads=1 if mla else 2, head_dim=80 if mla else 32,
                         v_head_dim=64 if mla else 32, dtype=dtype, seed=6, device=DEVICE)  # fmt: skip
        if mla:
            e.v_extend = e.k_extend[..., :64]
        fp8_pool(e.pool, fp8_dtype, k_scale, scales["v_scale"], mla_v_dim=64 if mla else None)
        out = extend_attention(*e.args(), **scales)
        assert_close(out, reference.extend_attention(*e.args(), **scales), scale=2, msg=f"extend mla={mla}")


def _named(kernel, constexprs):
    """A launch plan's constexprs (`ops.launch.constexpr_args`: the signature's tail) by name."""
    return dict(zip(kernel.arg_names[len(kernel.arg_names) - len(constexprs):], constexprs))


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.parametrize("unified", [False, True])
@settings(max_examples=4)
@given(
    fp8_dtype=st.sampled_from(FP8_DTYPES),
    dtype=st.sampled_from([torch.float16, torch.bfloat16]),
    prefix=st.lists(st.integers(0, 40), min_size=1, max_size=2),
    window=st.sampled_from([None, 7]),
    scales=st.sampled_from([(1.0, 1.0), (0.1, 3.0)]),
    seed=st.integers(0, 2**16),
)
def test_extend_fp8_pool_matches_dequantized_reference(formulation, unified, fp8_dtype, dtype, prefix, window, scales,
                                                       seed):  # fmt: skip
    k_scale, v_scale = scales
    extend = [(seed + i) % 19 + 1 for i in range(len(prefix))]
    e = extend_batch(prefix, extend, q_heads=4, kv_heads=2, head_dim=32, dtype=dtype, seed=seed, page_size=4,
                     sliding_window=window, device=DEVICE)  # fmt: skip
    fp8_pool(e.pool, fp8_dtype, k_scale, v_scale)
    if not unified:
        out = extend_attention(*e.args(), **e.kwargs(), formulation=formulation, k_scale=k_scale, v_scale=v_scale)
        want = reference.extend_attention(*e.args(), **e.kwargs(), k_scale=k_scale, v_scale=v_scale)
        assert_close(out, want, scale=2)
        return
    # unified: the new tokens are stored first (store_kv encodes them) and read from the pool
    p = e.pool
    pool_k = torch.cat([p.k_buffer, torch.zeros(sum(extend), *p.k_buffer.shape[1:], dtype=fp8_dtype, device=DEVICE)])
    pool_v = torch.cat([p.v_buffer, torch.zeros(sum(extend), *p.v_buffer.shape[1:], dtype=fp8_dtype, device=DEVICE)])
    new_slots = torch.arange(p.k_buffer.shape[0], pool_k.shape[0], device=DEVICE)
    store_kv(e.k_extend, e.v_extend, pool_k, pool_v, new_slots, k_scale=k_scale, v_scale=v_scale)
    indices, indptr, start = [], [0], 0
    for b in range(len(prefix)):
        indices += [p.slots(b), new_slots[start : start + extend[b]]]
        start += extend[b]
        indptr.append(indptr[-1] + prefix[b] + extend[b])
    kv_indices = torch.cat(indices).to(torch.int32)
    kv_indptr = torch.tensor(indptr, dtype=torch.int32, device=DEVICE)
    o = torch.empty_like(e.q_extend)
    args = (e.q_extend, e.k_extend, e.v_extend, o, pool_k, pool_v, e.qo_indptr, kv_indptr, kv_indices,
            e.max_len_extend, e.sm_scale)  # fmt: skip
    out = extend_attention(*args, **e.kwargs(), formulation=formulation, unified_kv=True, k_scale=k_scale,
                           v_scale=v_scale)  # fmt: skip
    want = reference.extend_attention_unified(e.q_extend, o.clone(), pool_k, pool_v, e.qo_indptr, kv_indptr,
                                              kv_indices, e.sm_scale, 0.0, window, k_scale, v_scale)  # fmt: skip
    assert_close(out, want, scale=2)


@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES)
def test_extend_fp8_nan_code_reaches_the_rows_that_see_it(fp8_dtype):
    """A NaN byte in a cached value row reaches that value column of every new
    token (they all see the prefix), as in the dequantized reference."""
    e = extend_batch([8], [5], q_heads=2, kv_heads=1, head_dim=16, dtype=torch.float16, seed=4, device=DEVICE)
    fp8_pool(e.pool, fp8_dtype, 1.0, 1.0)
    e.pool.v_buffer.view(torch.uint8)[e.pool.slots(0)[3].long(), 0, 2] = 0x7F
    out = extend_attention(*e.args())
    assert out[..., 2].isnan().all() and out[..., 3:].isfinite().all()
    assert_close(out, reference.extend_attention(*e.args()))


def test_fp8_attention_bad_input_errors():
    batch = decode_batch([5], q_heads=2, kv_heads=1, head_dim=16, dtype=torch.float16, device=DEVICE)
    fp8_pool(batch.pool, torch.float8_e4m3fn, 1.0, 1.0)
    q, kb, vb, o, indptr, indices, sm = batch.args()
    o.fill_(7.0)
    with pytest.raises(ValueError, match="decode_attention: k_buffer .* and v_buffer .* must both be"):
        decode_attention(q, kb, vb.view(torch.float8_e5m2), o, indptr, indices, sm)
    with pytest.raises(ValueError, match="decode_attention: k_buffer .* must both be the compute dtype"):
        decode_attention(q, kb.view(torch.uint8).to(torch.bfloat16), vb.view(torch.uint8).to(torch.bfloat16), o,
                         indptr, indices, sm)  # fmt: skip
    with pytest.raises(ValueError, match="decode_attention: v_scale must be > 0"):
        decode_attention(q, kb, vb, o, indptr, indices, sm, v_scale=-1.0)
    with pytest.raises(TypeError, match="decode_attention: k_scale must be a number"):
        decode_attention(q, kb, vb, o, indptr, indices, sm, k_scale="1")
    plain = decode_batch([5], q_heads=2, kv_heads=1, head_dim=16, dtype=torch.float16, device=DEVICE)
    with pytest.raises(ValueError, match="decode_attention: k_scale=0.5 applies to an fp8 KV pool only"):
        decode_attention(*plain.args()[:3], o, indptr, indices, sm, k_scale=0.5)
    assert (o == 7.0).all()
    e = extend_batch([4], [3], q_heads=2, kv_heads=1, head_dim=16, dtype=torch.float16, device=DEVICE)
    fp8_pool(e.pool, torch.float8_e5m2, 1.0, 1.0)
    with pytest.raises(ValueError, match="extend_attention: v_scale must be finite"):
        extend_attention(*e.args(), v_scale=float("inf"))
