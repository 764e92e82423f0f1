"""rotary_embedding against an oracle written here as complex multiplication.

Each rotated pair (a, b) is the complex number a + ib times exp(i * theta),
with cos(theta) and sin(theta) read from the very cache passed to the op: a
different formulation from the kernel's and from `kunlun_triton.ops.rope.reference`.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import strategies
from strategies import DEVICE

import kunlun_triton
from kunlun_triton.ops import rotary_embedding
from kunlun_triton.runtime import FLOAT_DTYPES, get_config
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.testing import LOWERING_TARGETS, SHIPPED_TARGETS, aot_target, assert_close, assert_lowers, target_id

MAX_POSITION = 64


def make_cache(rotary_dim, dtype, base=10000.0, max_position=MAX_POSITION):
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.outer(torch.arange(max_position, dtype=torch.float64), inv_freq)
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype).to(DEVICE)


def oracle(x, positions, head_size, cache, is_neox):
    """Rotated copy of x ([tokens, heads * head_size] or [tokens, heads, head_size])."""
    heads = x.double().reshape(x.shape[0], -1, head_size).clone()
    half = cache.shape[1] // 2
    cos, sin = cache.double()[positions.long()].split(half, dim=-1)
    rotation = torch.complex(cos, sin).unsqueeze(1)  # [tokens, 1, half]
    if is_neox:
        pairs = torch.complex(heads[..., :half], heads[..., half : 2 * half])
    else:
        pairs = torch.complex(heads[..., 0 : 2 * half : 2], heads[..., 1 : 2 * half : 2])
    rotated = pairs * rotation
    if is_neox:
        heads[..., :half], heads[..., half : 2 * half] = rotated.real, rotated.imag
    else:
        heads[..., 0 : 2 * half : 2], heads[..., 1 : 2 * half : 2] = rotated.real, rotated.imag
    return heads.reshape(x.shape).to(x.dtype)


def heads_tensor(tokens, heads, head_size, dtype, three_dim, strided, seed):
    gen = torch.Generator().manual_seed(seed)
    pad = 5 if strided else 0
    base = torch.randn(tokens, heads * head_size + pad, generator=gen).to(dtype).to(DEVICE)
    x = base[:, : heads * head_size]
    return x.view(tokens, heads, head_size) if three_dim else x


@st.composite
def rope_cases(draw):
    head_size = draw(st.sampled_from([16, 64, 96, 128]))
    rotary_dim = 2 * draw(st.integers(1, head_size // 2))
    rotary_dim = draw(st.sampled_from([head_size, head_size // 2, rotary_dim]))
    return dict(
        tokens=draw(st.integers(1, 9)),
        q_heads=draw(st.integers(1, 4)),
        k_heads=draw(st.integers(0, 3)),  # 0: key is None
        head_size=head_size,
        rotary_dim=rotary_dim,
        dtype=draw(strategies.float_dtypes()),
        is_neox=draw(st.booleans()),
        three_dim=draw(st.booleans()),
        strided=draw(st.booleans()),
        positions_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
        seed=draw(strategies.seeds()),
    )


@given(case=rope_cases())
def test_matches_oracle(case):
    c = case
    query = heads_tensor(c["tokens"], c["q_heads"], c["head_size"], c["dtype"], c["three_dim"], c["strided"], c["seed"])
    key = None
    if c["k_heads"]:
        key = heads_tensor(c["tokens"], c["k_heads"], c["head_size"], c["dtype"], c["three_dim"], not c["strided"],
                           c["seed"] + 1)  # fmt: skip
    gen = torch.Generator().manual_seed(c["seed"])
    positions = torch.randint(0, MAX_POSITION, (c["tokens"],), generator=gen, dtype=c["positions_dtype"]).to(DEVICE)
    cache = make_cache(c["rotary_dim"], c["dtype"])
    expected_q = oracle(query, positions, c["head_size"], cache, c["is_neox"])
    expected_k = None if key is None else oracle(key, positions, c["head_size"], cache, c["is_neox"])
    q_ptr = query.data_ptr()

    kunlun_triton.reset_dispatch_report()
    out_q, out_k = rotary_embedding(positions, query, key, c["head_size"], cache, c["is_neox"])

    assert kunlun_triton.dispatch_report()["rotary_embedding"]["impl"] == "triton"
    assert out_q is query and out_k is key and query.data_ptr() == q_ptr
    assert_close(query, expected_q, msg="query")
    if key is not None:
        assert_close(key, expected_k, msg="key")


@pytest.mark.parametrize("is_neox", [True, False])
def test_tail_past_rotary_dim_is_untouched(is_neox):
    head_size, rotary_dim = 96, 32
    query = torch.randn(5, 3 * head_size, device=DEVICE)
    key = torch.randn(5, 2, head_size, device=DEVICE)
    q_before, k_before = query.clone(), key.clone()
    positions = torch.arange(5, device=DEVICE)
    rotary_embedding(positions, query, key, head_size, make_cache(rotary_dim, torch.float32), is_neox)
    q_heads = query.view(5, 3, head_size)
    assert torch.equal(q_heads[..., rotary_dim:], q_before.view(5, 3, head_size)[..., rotary_dim:])
    assert torch.equal(key[..., rotary_dim:], k_before[..., rotary_dim:])
    assert not torch.equal(q_heads[1:, :, :rotary_dim], q_before.view(5, 3, head_size)[1:, :, :rotary_dim])


def test_position_zero_is_identity_and_pairs_keep_their_norm():
    # Two properties any rotation has, independent of layout bookkeeping.
    query = torch.randn(4, 2 * 64, device=DEVICE)
    before = query.clone()
    positions = torch.tensor([0, 0, 5, 63], device=DEVICE)
    rotary_embedding(positions, query, None, 64, make_cache(64, torch.float32), True)
    assert_close(query[:2], before[:2])
    after, orig = query.view(4, 2, 2, 32), before.view(4, 2, 2, 32)
    assert_close(after.pow(2).sum(2), orig.pow(2).sum(2), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_qkv_slices_of_one_buffer(dtype):
    # SGLang hands q and k as slices of the fused qkv projection output.
    tokens, q_heads, kv_heads, head_size = 7, 4, 2, 64
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_size).to(dtype).to(DEVICE)
    query, key, value = qkv.split([q_heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)
    value_before = value.clone()
    positions = torch.randint(0, MAX_POSITION, (tokens,), device=DEVICE)
    cache = make_cache(head_size, torch.float32)  # fp32 cache with a low-precision model, as SGLang may keep
    expected_q = oracle(query, positions, head_size, cache, True)
    expected_k = oracle(key, positions, head_size, cache, True)
    rotary_embedding(positions, query, key, head_size, cache, True)
    assert_close(query, expected_q)
    assert_close(key, expected_k)
    assert torch.equal(value, value_before)


def test_reference_fallback_path(monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", "torch")
    kunlun_triton.reset_dispatch_report()
    for is_neox in (True, False):
        query, key = torch.randn(3, 2 * 64, device=DEVICE).half(), torch.randn(3, 1, 64, device=DEVICE).half()
        positions = torch.tensor([1, 7, 30], device=DEVICE)
        cache = make_cache(32, torch.float16)
        expected_q = oracle(query, positions, 64, cache, is_neox)
        expected_k = oracle(key, positions, 64, cache, is_neox)
        rotary_embedding(positions, query, key, 64, cache, is_neox)
        assert_close(query, expected_q)
        assert_close(key, expected_k)
    assert kunlun_triton.dispatch_report()["rotary_embedding"]["impl"] == "torch"


POS = torch.tensor([0, 1, 2], device=DEVICE)
Q = torch.randn(3, 2 * 16, device=DEVICE)
K = torch.randn(3, 16, device=DEVICE)
CACHE = make_cache(16, torch.float32)


@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("three_dim", [False, True])
def test_zero_tokens_return_on_every_path(monkeypatch, backend, three_dim):
    monkeypatch.setenv("KUNLUN_TRITON_BACKEND", backend)
    shape = (0, 2, 16) if three_dim else (0, 32)
    query, key = torch.empty(shape, device=DEVICE), torch.empty(shape, device=DEVICE)
    out = rotary_embedding(torch.empty(0, dtype=torch.int64, device=DEVICE), query, key, 16, CACHE, True)
    assert out[0] is query and out[1] is key


BAD_INPUTS = [
    ("positions", TypeError, lambda: rotary_embedding(POS.float(), Q, K, 16, CACHE, True)),
    ("positions", ValueError, lambda: rotary_embedding(POS.view(3, 1), Q, K, 16, CACHE, True)),
    ("positions", ValueError, lambda: rotary_embedding(torch.tensor([0, 1, MAX_POSITION], device=DEVICE), Q, K, 16, CACHE, True)),
    ("positions", ValueError, lambda: rotary_embedding(torch.tensor([0, -1, 2], device=DEVICE), Q, K, 16, CACHE, True)),
    ("query", TypeError, lambda: rotary_embedding(POS, Q.to(torch.int32), K, 16, CACHE, True)),
    ("query", ValueError, lambda: rotary_embedding(POS, torch.randn(3, 30, device=DEVICE), K, 16, CACHE, True)),
    ("query", ValueError, lambda: rotary_embedding(POS, torch.randn(2, 32, device=DEVICE), K, 16, CACHE, True)),
    ("query", ValueError, lambda: rotary_embedding(POS, torch.randn(32, 3, device=DEVICE).t(), K, 16, CACHE, True)),
    ("query", ValueError, lambda: rotary_embedding(POS, torch.randn(3, 2, 8, device=DEVICE), K, 16, CACHE, True)),
    ("query", ValueError, lambda: rotary_embedding(POS, torch.randn(32, device=DEVICE), K, 16, CACHE, True)),
    ("key", TypeError, lambda: rotary_embedding(POS, Q, K.half(), 16, CACHE, True)),
    ("key", ValueError, lambda: rotary_embedding(POS, Q, torch.randn(4, 16, device=DEVICE), 16, CACHE, True)),
    ("head_size", ValueError, lambda: rotary_embedding(POS, Q, K, 0, CACHE, True)),
    ("cos_sin_cache", ValueError, lambda: rotary_embedding(POS, Q, K, 16, make_cache(32, torch.float32), True)),
    ("cos_sin_cache", ValueError, lambda: rotary_embedding(POS, Q, K, 16, CACHE[:, :15], True)),
    ("cos_sin_cache", TypeError, lambda: rotary_embedding(POS, Q, K, 16, CACHE.to(torch.int64), True)),
    ("is_neox", TypeError, lambda: rotary_embedding(POS, Q, K, 16, CACHE, "neox")),
    # rotated in place: a view whose tokens or heads alias one another is refused
    ("query", ValueError, lambda: rotary_embedding(POS, Q[:1].expand(3, 32), K, 16, CACHE, True)),
    ("key", ValueError, lambda: rotary_embedding(POS, Q, K[:1].expand(3, 16), 16, CACHE, True)),
    ("query", ValueError, lambda: rotary_embedding(POS, Q[:, :16].unsqueeze(1).expand(3, 2, 16), K, 16, CACHE, True)),
]


@pytest.mark.parametrize("name,error,call", BAD_INPUTS, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD_INPUTS)])
def test_bad_inputs_name_the_argument(name, error, call):
    query_before = Q.clone()
    with pytest.raises(error, match=name):
        call()
    assert torch.equal(Q, query_before), "a rejected call must not touch query"


@pytest.mark.lowering
def test_kernel_lowers_for_cuda_and_hip():
    """As the launcher plans it for each target (`OpSpec.kernels`): decode and
    prefill token counts, partial rotary dims, both layouts."""
    shapes = (
        ({"tokens": 1, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "neox": True}, torch.float16),
        ({"tokens": 300, "q_heads": 4, "kv_heads": 2, "head_dim": 96, "rotary_dim": 64, "neox": False}, torch.bfloat16),
        ({"tokens": 7, "q_heads": 3, "kv_heads": 1, "head_dim": 32, "rotary_dim": 16, "neox": True}, torch.float16),
    )
    assert_lowers([(k, aot_target(target)) for target in LOWERING_TARGETS for shape, dtype in shapes
                   for k in planned_kernels("rotary_embedding", shape, dtype, target)])  # fmt: skip


@pytest.mark.parametrize("target", SHIPPED_TARGETS, ids=target_id)
def test_shipped_configs_of_every_target(target):
    cache = make_cache(64, torch.float16)
    for tokens, k_heads, is_neox in ((1, 3, True), (20, 3, False), (20, 0, True)):
        query = torch.randn(tokens, 5 * 64, device=DEVICE).half()
        key = torch.randn(tokens, k_heads, 64, device=DEVICE).half() if k_heads else None
        positions = torch.randint(0, MAX_POSITION, (tokens,), device=DEVICE)
        expected_q = oracle(query, positions, 64, cache, is_neox)
        expected_k = None if key is None else oracle(key, positions, 64, cache, is_neox)
        config = get_config("rotary_embedding", target=target, head_size=64, tokens=tokens)
        rotary_embedding(positions, query, key, 64, cache, is_neox, config=config)
        assert_close(query, expected_q, msg=f"query, {tokens} tokens")
        if key is not None:
            assert_close(key, expected_k, msg=f"key, {tokens} tokens")


def _cache(max_pos, rotary_dim):
    return torch.randn(max_pos, rotary_dim, device=DEVICE)


@pytest.mark.parametrize("how", ["same tensor", "key cut across the query's rows", "positions inside the query"])
def test_overlapping_query_and_key_are_refused_and_nothing_changes(how):
    """Issue 25: rotary_embedding(pos, q, q, ...) rotated q twice."""
    n, heads, hs = 5, 2, 8
    positions = torch.arange(n, device=DEVICE)
    buf = torch.randn(n, 3 * heads * hs, device=DEVICE)
    query = buf[:, : heads * hs]
    key = {"same tensor": query, "key cut across the query's rows": buf[:, hs: hs + heads * hs],
           "positions inside the query": buf[:, heads * hs: 2 * heads * hs]}[how]  # fmt: skip
    if how == "positions inside the query":
        positions = buf.view(-1)[:n].view(torch.int32)  # int32 bits of the query's first row
    before = buf.clone()
    with pytest.raises(ValueError, match="share memory"):
        rotary_embedding(positions, query, key, hs, _cache(64, hs), True)
    assert torch.equal(buf, before)


def test_q_and_k_views_of_one_fused_buffer_still_rotate():
    """SGLang's layout: q and k are column slices of one qkv buffer (rows
    interleave, no element shared): accepted, same answer as separate tensors."""
    n, heads, hs = 5, 2, 8
    positions = torch.arange(n, device=DEVICE)
    qkv = torch.randn(n, 3 * heads * hs, device=DEVICE)
    cache = _cache(64, hs)
    q_sep, k_sep = qkv[:, : heads * hs].clone(), qkv[:, heads * hs: 2 * heads * hs].clone()
    rotary_embedding(positions, q_sep, k_sep, hs, cache, True)
    rotary_embedding(positions, qkv[:, : heads * hs], qkv[:, heads * hs: 2 * heads * hs], hs, cache, True)
    assert torch.equal(qkv[:, : heads * hs], q_sep) and torch.equal(qkv[:, heads * hs: 2 * heads * hs], k_sep)
