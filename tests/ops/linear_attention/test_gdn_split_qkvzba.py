"""gdn_split_qkvzba (a GDN layer's input projections cut into q | k | v, z,
b, a) against an oracle written here from the layouts alone: each output
element names the input element it copies, one token and one head at a
time; bitwise, in both layouts (Qwen3-Next's per-key-head interleave, Qwen3.5's
side-by-side projections), for value heads 1, 2, 3 and 4 times the key heads,
0 and 1 tokens, inputs that are column slices of a wider buffer (a fused
projection's output, as SGLang hands Qwen3.5's). The reference (the torch
fallback, from HF's ``fix_query_key_value_ordering``) is held to the same
oracle; SGLang's own kernels and HF's method: test_gdn_split_qkvzba_sglang.py."""

import pytest
import torch
from hypothesis import given, strategies as st

from la_strategies import randn
from strategies import DEVICE

from kunlun_triton.ops import gdn_split_qkvzba
from kunlun_triton.ops.linear_attention import reference

LAYOUTS = ("interleaved", "contiguous")


def _oracle(qkvz, ba, H, HV, K, V, layout):
    """Element by element: where token t's q / k of key head h, v / z of value
    head j, b / a of value head j sit in the inputs."""
    G, T = HV // H, qkvz.shape[0]
    q, k = torch.zeros(T, H, K, dtype=qkvz.dtype), torch.zeros(T, H, K, dtype=qkvz.dtype)
    v, z = torch.zeros(T, HV, V, dtype=qkvz.dtype), torch.zeros(T, HV, V, dtype=qkvz.dtype)
    b, a = torch.zeros(T, HV, dtype=ba.dtype), torch.zeros(T, HV, dtype=ba.dtype)
    qkvz, ba = qkvz.cpu(), ba.cpu()
    for h in range(H):
        if layout == "interleaved":
            base = h * (2 * K + 2 * G * V)
            q_at, k_at, v_at, z_at = base, base + K, base + 2 * K, base + 2 * K + G * V
            b_at, a_at = 2 * G * h, 2 * G * h + G
        else:
            q_at, k_at, v_at, z_at = h * K, H * K + h * K, 2 * H * K + h * G * V, 2 * H * K + HV * V + h * G * V
            b_at, a_at = h * G, HV + h * G
        q[:, h], k[:, h] = qkvz[:, q_at : q_at + K], qkvz[:, k_at : k_at + K]
        for i in range(G):  # value head j = h G + i
            j = h * G + i
            v[:, j], z[:, j] = qkvz[:, v_at + i * V : v_at + (i + 1) * V], qkvz[:, z_at + i * V : z_at + (i + 1) * V]
            b[:, j], a[:, j] = ba[:, b_at + i], ba[:, a_at + i]
    return torch.cat([q.reshape(T, H * K), k.reshape(T, H * K), v.reshape(T, HV * V)], dim=1), z, b, a


def _inputs(gen, T, H, HV, K, V, dtype, ba_dtype, pad):
    """Projections as SGLang hands them; pad > 0: column slices of wider rows."""
    width = 2 * H * K + 2 * HV * V
    qkvz = randn(gen, T, width + pad, dtype=dtype)[:, :width]
    ba = randn(gen, T, 2 * HV + pad, dtype=ba_dtype)[:, pad:]
    return qkvz, ba


def _assert_bitwise(got, want):
    for name, g, w in zip(("mixed_qkv", "z", "b", "a"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape, g.dtype, w.dtype)
        assert g.is_contiguous(), name  # SGLang's conv and gates read them as dense rows
        assert torch.equal(g.cpu(), w.cpu()), name


heads = st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 3, 4]))  # (key heads, group)


@given(layout=st.sampled_from(LAYOUTS), kv=heads, K=st.sampled_from([4, 12, 16]), V=st.sampled_from([8, 13, 16]),
       tokens=st.sampled_from([0, 1, 2, 5, 9]), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       ba_fp32=st.booleans(), pad=st.sampled_from([0, 3]), seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_split_matches_the_oracle_bitwise(layout, kv, K, V, tokens, dtype, ba_fp32, pad, seed):
    H, G = kv
    HV = H * G
    gen = torch.Generator().manual_seed(seed)
    qkvz, ba = _inputs(gen, tokens, H, HV, K, V, dtype, torch.float32 if ba_fp32 else dtype, pad)
    want = _oracle(qkvz, ba, H, HV, K, V, layout)
    _assert_bitwise(gdn_split_qkvzba(qkvz, ba, H, HV, K, V, layout), want)
    _assert_bitwise(reference.gdn_split_qkvzba(qkvz, ba, H, HV, K, V, layout), want)


@pytest.mark.parametrize("block_t, heads", [(1, 1), (2, 2), (8, 4), (4, 3), (16, 64)])
def test_token_and_head_blocks_cover_everything(block_t, heads):
    """Several token blocks, the last one partly masked; key heads one, two,
    four (all) a program, and 3 or 64 (the op takes the gcd with 4: 1, 4)."""
    gen = torch.Generator().manual_seed(1)
    qkvz, ba = _inputs(gen, 11, 4, 8, 16, 8, torch.float32, torch.float32, 0)
    for layout in LAYOUTS:
        got = gdn_split_qkvzba(qkvz, ba, 4, 8, 16, 8, layout,
                               config={"BLOCK_T": block_t, "HEADS_PER_PROGRAM": heads, "num_warps": 1})  # fmt: skip
        _assert_bitwise(got, _oracle(qkvz, ba, 4, 8, 16, 8, layout))


def test_batches_past_int32_offsets_launch_in_pieces(monkeypatch):
    """The kernel's offsets are int32: a batch whose rows reach 2**31 elements
    is launched a few rows at a time (here the limit is lowered to 3 rows)."""
    from kunlun_triton.introspect.launches import record_launches
    from kunlun_triton.ops.linear_attention import split_qkvzba

    gen = torch.Generator().manual_seed(2)
    qkvz, ba = _inputs(gen, 7, 2, 4, 8, 8, torch.float32, torch.float32, 5)
    monkeypatch.setattr(split_qkvzba, "MAX_OFFSET", 3 * qkvz.stride(0))
    config = {"BLOCK_T": 1, "HEADS_PER_PROGRAM": 1}
    assert len(record_launches(lambda: gdn_split_qkvzba(qkvz, ba, 2, 4, 8, 8, config=config))) == 3
    _assert_bitwise(gdn_split_qkvzba(qkvz, ba, 2, 4, 8, 8, config=config), _oracle(qkvz, ba, 2, 4, 8, 8, "interleaved"))


def _bad(**change):
    qkvz, ba = torch.randn(3, 2 * 2 * 8 + 2 * 4 * 8, device=DEVICE), torch.randn(3, 8, device=DEVICE)
    args = {"mixed_qkvz": qkvz, "mixed_ba": ba, "num_k_heads": 2, "num_v_heads": 4, "head_k_dim": 8,
            "head_v_dim": 8, "layout": "interleaved"}  # fmt: skip
    return {**args, **change}


@pytest.mark.parametrize("change, match", [
    (dict(mixed_qkvz=torch.zeros(3, 96, dtype=torch.int32)), "mixed_qkvz"),
    (dict(mixed_qkvz=torch.zeros(3, 95)), r"mixed_qkvz must be \[tokens, .*96\]"),
    (dict(mixed_qkvz=torch.zeros(3, 1, 96)), "mixed_qkvz"),
    (dict(mixed_ba=torch.zeros(2, 8)), r"mixed_ba must be \[tokens, 2 x value heads\] = \[3, 8\]"),
    (dict(mixed_ba=torch.zeros(3, 6)), r"mixed_ba must be"),
    (dict(mixed_qkvz=torch.zeros(96, 3).T), "contiguous"),
    (dict(num_v_heads=3, mixed_qkvz=torch.zeros(3, 80), mixed_ba=torch.zeros(3, 6)), "multiple of key heads"),
    (dict(num_k_heads=0), "num_k_heads"),
    (dict(head_v_dim=2.5), "head_v_dim"),
    (dict(layout="packed"), "layout must be one of"),
    (dict(mixed_ba=torch.zeros(3, 8, device="meta")), "one device"),
])  # fmt: skip
def test_bad_inputs_are_refused_naming_the_problem(change, match):
    args = _bad(**{k: v.to(DEVICE) if isinstance(v, torch.Tensor) and v.device.type != "meta" else v
                   for k, v in change.items()})  # fmt: skip
    with pytest.raises((ValueError, TypeError), match=match):
        gdn_split_qkvzba(**args)


def test_block_t_must_be_a_power_of_two():
    with pytest.raises(ValueError, match=r"BLOCK_T.*must be a power of two"):
        gdn_split_qkvzba(**_bad(), config={"BLOCK_T": 3})


def test_the_triton_path_ran():
    """The tests above ran the kernel, not the torch fallback (conftest forces
    KUNLUN_TRITON_BACKEND=triton: a fallback would raise)."""
    from kunlun_triton.runtime.dispatch import dispatch_report

    gdn_split_qkvzba(**_bad())
    assert dispatch_report()["gdn_split_qkvzba"]["impl"] == "triton"
