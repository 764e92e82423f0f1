"""Bad inputs raise a clear error naming the argument, before any kernel runs."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.introspect.paged import decode_batch, extend_batch
from kunlun_triton.ops import decode_attention, extend_attention


def _decode(**changes):
    b = decode_batch([5, 3], q_heads=4, kv_heads=2, head_dim=16, dtype=torch.float16, device=DEVICE)
    args = dict(zip(["q", "k_buffer", "v_buffer", "o", "kv_indptr", "kv_indices", "sm_scale"], b.args()))
    args.update(changes)
    return args


def _extend(**changes):
    b = extend_batch([4, 2], [3, 5], q_heads=4, kv_heads=2, head_dim=16, dtype=torch.float16, device=DEVICE)
    names = ["q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr", "kv_indptr",
             "kv_indices", "max_len_extend", "sm_scale"]
    args = dict(zip(names, b.args()))
    args.update(changes)
    return args


@pytest.mark.parametrize(
    "changes, error, pattern",
    [
        (dict(kv_indptr=torch.tensor([0, 5, 2], dtype=torch.int32, device=DEVICE)), ValueError, "kv_indptr must be non-decreasing"),
        (dict(kv_indptr=torch.tensor([0, 5, 99], dtype=torch.int32, device=DEVICE)), ValueError, r"kv_indptr\[-1\] = 99 exceeds len\(kv_indices\)"),
        (dict(kv_indptr=torch.tensor([0, 8], dtype=torch.int32, device=DEVICE)), ValueError, "batch \\+ 1 = 3"),
        (dict(kv_indices=torch.tensor([0, 1, 2, 3, 4, 5, 6, 10_000], dtype=torch.int32, device=DEVICE)), ValueError, "slot id 10000"),
        (dict(kv_indices=torch.tensor([0, 1, 2, -1, 4, 5, 6, 7], dtype=torch.int32, device=DEVICE)), ValueError, "slot id -1"),
        (dict(q=torch.zeros(2, 4, 16, dtype=torch.float32, device=DEVICE)), ValueError, "dtypes must match.*q=torch.float32"),
        (dict(q=torch.zeros(2, 4, 32, dtype=torch.float16, device=DEVICE)), ValueError, "head dims"),
        (dict(q=torch.zeros(2, 3, 16, dtype=torch.float16, device=DEVICE)), ValueError, "3 heads, not a multiple"),
        (dict(q=torch.zeros(2, 4, 16, 1, dtype=torch.float16, device=DEVICE)), ValueError, "q must have 3 dims"),
        (dict(q=torch.zeros(2, 4, 32, dtype=torch.float16, device=DEVICE)[:, :, ::2]), ValueError, "q must be contiguous in its last"),
        (dict(o=torch.zeros(2, 4, 8, dtype=torch.float16, device=DEVICE)), ValueError, "o's shape"),
        (dict(kv_indices=torch.zeros(8, device=DEVICE)), TypeError, "kv_indices has dtype torch.float32; expected one of int32, int64"),
        (dict(q=torch.zeros(2, 4, 16, dtype=torch.int8, device=DEVICE)), TypeError, "q has dtype torch.int8"),
    ],
)
def test_decode_rejects(changes, error, pattern):
    with pytest.raises(error, match=pattern):
        decode_attention(**_decode(**changes))


@pytest.mark.parametrize(
    "changes, pattern",
    [
        (dict(qo_indptr=torch.tensor([0, 5, 3], dtype=torch.int32, device=DEVICE)), "qo_indptr must be non-decreasing"),
        (dict(qo_indptr=torch.tensor([0, 3, 9], dtype=torch.int32, device=DEVICE)), r"qo_indptr\[-1\] = 9 exceeds the token count"),
        (dict(max_len_extend=4), "max_len_extend = 4 but a request extends by 5"),
        (dict(kv_indptr=torch.tensor([0, 4, 3], dtype=torch.int32, device=DEVICE)), "kv_indptr must be non-decreasing"),
        (dict(kv_indices=torch.tensor([0, 1, 2, 3, 4, 999], dtype=torch.int32, device=DEVICE)), "slot id 999"),
        (dict(k_extend=torch.zeros(8, 1, 16, dtype=torch.float16, device=DEVICE)), "k_extend's shape"),
        (dict(v_extend=torch.zeros(8, 2, 16, dtype=torch.float32, device=DEVICE)), "dtypes must match"),
    ],
)
def test_extend_rejects(changes, pattern):
    with pytest.raises(ValueError, match=pattern):
        extend_attention(**_extend(**changes))


def test_unchecked_mode_skips_value_checks(monkeypatch):
    """check=False or KUNLUN_TRITON_CHECK=0 skips the host sync; a duplicate
    -free but non-monotone indptr then runs (garbage in, no error)."""
    bad = dict(kv_indptr=torch.tensor([0, 5, 2], dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError):
        decode_attention(**_decode(**bad))
    decode_attention(**_decode(**bad), check=False)
    monkeypatch.setenv("KUNLUN_TRITON_CHECK", "0")
    decode_attention(**_decode(**bad))


@pytest.mark.parametrize("op", ["decode_attention", "extend_attention"])
def test_kunlun_profile_picks_the_sum_formulation(op):
    """The tl.dot -> softmax -> tl.dot chain breaks Kunlun's compiler (docs/design.md):
    its config must select the tl.sum formulation until a card proves dot."""
    from kunlun_triton.runtime import Target, get_config

    kunlun = Target("kunlun", "p800", "cuda", "test")
    assert get_config(op, target=kunlun, head_dim=128, group=4, batch=1)["formulation"] == "sum"
    for name, arch in (("cuda", "sm_90"), ("hip", "gfx942"), ("interpreter", "cpu")):
        assert get_config(op, target=Target(name, arch, "cuda", "test"), head_dim=128, group=4, batch=1)["formulation"] == "dot"
