"""Batch-invariant (deterministic) attention: a row's result, bit for bit,
depends only on its own sequence, never on its batch or on how the sequence
was split into cached prefix and extend.

- extend with ``unified_kv``: one sequence's queries, the same keys, cut
  into (prefix, extend) at several points and batched with other requests:
  every position's output is bitwise equal in all cuts (and matches the
  torch reference within tolerance);
- decode with ``split_tile_size``: a request alone and inside batches of
  other lengths gives bitwise the same output.
"""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.ops import decode_attention, extend_attention
from kunlun_triton.ops.attention import reference as attention_reference
from kunlun_triton.testing import assert_close

SMALL_TILES = {"BLOCK_M": 16, "BLOCK_N": 16}  # several key tiles on a short sequence
HEADS, KV_HEADS, DIM = 4, 2, 16
SEQ = 45  # not a multiple of the tile: a ragged last tile
CUTS = (0, 7, 16, 30, 44)  # cached prefix lengths; 44: a radix hit leaving one new token


def _sequence(seed, n):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n, HEADS, DIM, generator=gen)
    k = torch.randn(n, KV_HEADS, DIM, generator=gen)
    v = torch.randn(n, KV_HEADS, DIM, generator=gen)
    return q, k, v


def _extend_call(requests, formulation, window, cut_of):
    """One unified extend over `requests` (q, k, v of whole sequences), each
    cut at cut_of[i]; the pool holds every key at scattered slots. Returns
    each request's output rows for its new tokens."""
    total = sum(q.shape[0] for q, _, _ in requests)
    perm = torch.randperm(total + 3, generator=torch.Generator().manual_seed(7))[:total]
    k_buffer = torch.zeros(total + 3, KV_HEADS, DIM)
    v_buffer = torch.zeros(total + 3, KV_HEADS, DIM)
    qs, ks, vs, indices, kv_lens, ext_lens, offset = [], [], [], [], [], [], 0
    for (q, k, v), cut in zip(requests, cut_of):
        slots = perm[offset : offset + q.shape[0]]
        offset += q.shape[0]
        k_buffer[slots], v_buffer[slots] = k, v
        qs.append(q[cut:]), ks.append(k[cut:]), vs.append(v[cut:])
        indices.append(slots)
        kv_lens.append(q.shape[0])
        ext_lens.append(q.shape[0] - cut)
    indptr = lambda lens: torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)  # noqa: E731
    q_ext = torch.cat(qs).to(DEVICE)
    o = torch.empty_like(q_ext)
    args = (q_ext, torch.cat(ks).to(DEVICE), torch.cat(vs).to(DEVICE), o, k_buffer.to(DEVICE), v_buffer.to(DEVICE),
            indptr(ext_lens).to(DEVICE), indptr(kv_lens).to(DEVICE), torch.cat(indices).to(torch.int32).to(DEVICE),
            max(ext_lens), DIM**-0.5)  # fmt: skip
    extend_attention(*args, sliding_window=window, formulation=formulation, unified_kv=True, config=SMALL_TILES)
    expected = attention_reference.extend_attention_unified(args[0], torch.empty_like(o), *args[4:9], DIM**-0.5,
                                                            sliding_window=window)  # fmt: skip
    assert_close(o, expected, msg=f"cuts {cut_of}")
    bounds = indptr(ext_lens).tolist()
    return [o[bounds[i] : bounds[i + 1]].cpu() for i in range(len(requests))]


@pytest.mark.parametrize("formulation", ["dot", "sum"])
@pytest.mark.parametrize("window", [None, 9])
def test_unified_extend_is_bitwise_the_same_for_every_prefix_cut(formulation, window):
    target = _sequence(0, SEQ)
    others = [_sequence(1, 21), _sequence(2, 3)]
    alone = _extend_call([target], formulation, window, [0])[0]  # the whole prompt, uncached
    for cut in CUTS[1:]:
        rows = _extend_call([target], formulation, window, [cut])[0]
        assert torch.equal(rows, alone[cut:]), f"prefix {cut}: max diff {(rows - alone[cut:]).abs().max()}"
    # batched with others, cut elsewhere, and placed second
    rows = _extend_call([others[0], target, others[1]], formulation, window, [5, 16, 0])[1]
    assert torch.equal(rows, alone[16:])


def test_unified_extend_refuses_kv_shorter_than_extend():
    q, k, v = _sequence(3, 4)
    o = torch.empty_like(q)
    one = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="unified_kv"):
        extend_attention(q, k, v, o, k, v, one, torch.tensor([0, 3], dtype=torch.int32),
                         torch.arange(3, dtype=torch.int32), 4, 0.25, unified_kv=True)  # fmt: skip


@pytest.mark.parametrize("formulation", ["dot", "sum"])
def test_fixed_split_tiles_decode_is_batch_invariant(formulation):
    lens = [45, 3, 90, 17]  # the target (45 keys) alone and among others
    gen = torch.Generator().manual_seed(11)
    slots_total = sum(lens) + 1
    k_buffer = torch.randn(slots_total, KV_HEADS, DIM, generator=gen).to(DEVICE)
    v_buffer = torch.randn(slots_total, KV_HEADS, DIM, generator=gen).to(DEVICE)
    q_all = torch.randn(len(lens), HEADS, DIM, generator=gen).to(DEVICE)
    slots = torch.randperm(slots_total, generator=gen)[: sum(lens)].to(torch.int32)
    starts = [0, *torch.tensor(lens).cumsum(0).tolist()]

    def run(members):
        ind = torch.cat([slots[starts[i] : starts[i + 1]] for i in members]).to(DEVICE)
        ptr = torch.tensor([0, *torch.tensor([lens[i] for i in members]).cumsum(0).tolist()], dtype=torch.int32)
        o = torch.empty(len(members), HEADS, DIM, device=DEVICE)
        decode_attention(q_all[members], k_buffer, v_buffer, o, ptr.to(DEVICE), ind, DIM**-0.5,
                         formulation=formulation, split_tile_size=32, config=SMALL_TILES)  # fmt: skip
        return o.cpu()

    alone = run([0])[0]
    expected = attention_reference.decode_attention(
        q_all[:1], k_buffer, v_buffer, torch.empty(1, HEADS, DIM, device=DEVICE),
        torch.tensor([0, 45], dtype=torch.int32, device=DEVICE), slots[:45].to(DEVICE), DIM**-0.5)  # fmt: skip
    assert_close(alone, expected[0].cpu())
    for members, at in (([1, 0], 1), ([0, 2, 3], 0), ([3, 2, 1, 0], 3)):
        assert torch.equal(run(members)[at], alone), f"batch {members}"
