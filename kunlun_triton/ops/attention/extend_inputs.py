"""What `extend_attention` derives from its inputs before planning a launch:
the checks of checked mode, which K/V layouts let a tile take V from K
(MLA's latent), and the bytes a call moves from L2 into the programs (the
model `kunlun-triton inspect extend_attention --traffic` prints)."""

from __future__ import annotations

from ...runtime import INDEX_DTYPES
from ..validation import check_indptr, check_slots, require_same, require_same_device, require_tensor
from .fp8 import check_pool_dtypes
from .shared import cdiv, check_kv_pool, latent_view

OP = "extend_attention"


def latent_flags(k_buffer, v_buffer, k_extend, v_extend) -> tuple[bool, bool]:
    """(the pool's V is its K rows' latent, the new tokens' V is theirs):
    `shared.latent_view`, same storage, offset and strides (SGLang's MLA pool
    hands V over as ``kv[..., :kv_lora_rank]``; its plugin passes the new
    tokens' V as the same view of their K rows). Strides and pointers only:
    no device work, nothing to trust, so checked mode has nothing to add."""
    return latent_view(k_buffer, v_buffer), latent_view(k_extend, v_extend)


def extend_traffic(prefix_lens, extend_lens, q_heads: int, head_dim: int, v_dim: int, elt: int,
                   block_m: int, *, kv_elt: int | None = None, v_in_k: bool = False, new_v_in_k: bool = False,
                   index_elt: int = 4) -> int:  # fmt: skip
    """Bytes one extend call moves from L2 into its programs: a program owns
    `block_m` new tokens of one q head and reads every prefix key (K row,
    V row unless `v_in_k`, its slot id of `index_elt` bytes) and the new
    keys up to its last row (K, V unless `new_v_in_k`), then q in, o out.
    `kv_elt`: the pool's bytes per value (fp8: 1). A custom mask's bytes are
    not counted (SGLang reads the same)."""
    kv_elt = elt if kv_elt is None else kv_elt
    prefix_row = (head_dim + (0 if v_in_k else v_dim)) * kv_elt + index_elt
    new_row = (head_dim + (0 if new_v_in_k else v_dim)) * elt
    total = 0
    for p, e in zip(prefix_lens, extend_lens):
        blocks = cdiv(e, block_m)
        new_keys = sum(min((j + 1) * block_m, e) for j in range(blocks))
        total += q_heads * (blocks * p * prefix_row + new_keys * new_row + e * (head_dim + v_dim) * elt)
    return total


def validate(q, k, v, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices, max_len_extend, unified_kv):
    """Checked mode's input checks: (group, batch, qo_indptr, kv_indptr) on the host."""
    for name, t in (("q_extend", q), ("k_extend", k), ("v_extend", v), ("o_extend", o)):
        require_tensor(OP, name, t, ndim=3)
    for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices)):
        require_tensor(OP, name, t, dtypes=INDEX_DTYPES, ndim=1)
    group = check_kv_pool(OP, q.shape[1], q.shape[2], k_buffer, v_buffer, "q_extend")
    require_same(OP, "dtypes", q_extend=q.dtype, k_extend=k.dtype, v_extend=v.dtype, o_extend=o.dtype)
    check_pool_dtypes(OP, q.dtype, k_buffer, v_buffer)
    require_same(OP, "k_extend's shape and (tokens, kv heads, head dim)", k_extend=tuple(k.shape),
                 expected=(q.shape[0], k_buffer.shape[1], k_buffer.shape[2]))
    require_same(OP, "v_extend's shape and (tokens, kv heads, v head dim)", v_extend=tuple(v.shape),
                 expected=(q.shape[0], v_buffer.shape[1], v_buffer.shape[2]))
    require_same(OP, "o_extend's shape and (tokens, q heads, v head dim)", o_extend=tuple(o.shape),
                 expected=(q.shape[0], q.shape[1], v_buffer.shape[2]))
    require_same_device(OP, q_extend=q, k_extend=k, v_extend=v, o_extend=o, k_buffer=k_buffer, v_buffer=v_buffer,
                        qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices)
    batch = qo_indptr.numel() - 1
    if batch < 0:
        raise ValueError(f"{OP}: qo_indptr must have batch + 1 entries, got none")
    qo = check_indptr(OP, "qo_indptr", qo_indptr, batch, q.shape[0], "the token count of q_extend")
    longest = int((qo[1:] - qo[:-1]).max()) if batch else 0
    if longest > max_len_extend:
        raise ValueError(f"{OP}: max_len_extend = {max_len_extend} but a request extends by {longest} tokens")
    kv = check_indptr(OP, "kv_indptr", kv_indptr, batch, kv_indices.numel(), "len(kv_indices)")
    if unified_kv and batch and bool(((kv[1:] - kv[:-1]) < (qo[1:] - qo[:-1])).any()):
        raise ValueError(f"{OP}: unified_kv: kv_indices must list every request's whole sequence, "
                         "but a request has fewer keys than new tokens")  # fmt: skip
    check_slots(OP, "kv_indices", kv_indices, k_buffer.shape[0], int(kv[-1]))
    return group, batch, qo, kv
