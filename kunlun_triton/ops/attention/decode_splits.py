"""A decode step's split plan and scratch: how many KV splits each request
gets, the partial buffers, the bytes a call moves (see `decode_attention`
for the maths).

- `split_policy`: the two run-time integers the kernels derive every
  request's split count from (``split_tokens``, ``max_splits``).
- `DecodeWorkspace` / `decode_workspace`: a step's partial buffers and split
  plan, made once and shared by every layer (and, per batch size, by a
  captured CUDA graph: nothing in it depends on the lengths).
- `splits_used`, `decode_traffic`: the same counts on the host, for
  ``kunlun-triton inspect --traffic``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...runtime import plan_cache
from ..spec import explicit_config, lookup_config
from ..validation import require_number
from .shared import AttentionPlan, attention_plan, cdiv

OP = "decode_attention"


@plan_cache
def _cached_plan(dtype, head_dim, v_dim, group, formulation):
    config = lookup_config(OP, head_dim=head_dim, group=group)
    return attention_plan(OP, config, dtype, head_dim, v_dim, group, formulation)


def _plan(config, dtype, head_dim, v_dim, group, formulation) -> AttentionPlan:
    if config is None:
        return _cached_plan(dtype, head_dim, v_dim, group, formulation)
    config = explicit_config(OP, config, head_dim=head_dim, group=group)
    return attention_plan(OP, config, dtype, head_dim, v_dim, group, formulation)


@dataclass(frozen=True)
class DecodeWorkspace:
    """Scratch and split plan of one decode step, shared by every layer.

    part_out [batch, q_heads, max_splits, v_head_dim] and part_lse [batch,
    q_heads, max_splits] fp32 hold the stage-1 partials; each request uses
    clamp(ceil(n / split_tokens), 1, max_splits) splits of its n visible keys.
    Build one with `decode_workspace`; a graph capture keeps one per batch
    size (nothing in it depends on the lengths)."""

    part_out: torch.Tensor
    part_lse: torch.Tensor
    split_tokens: int

    @property
    def max_splits(self) -> int:
        return self.part_out.shape[2]


def split_policy(plan: AttentionPlan, batch: int, head_programs: int, num_kv_splits=None, split_tile_size=None,
                 max_context_len=None) -> tuple[int, int]:  # fmt: skip
    """(split_tokens, max_splits) for a batch whose stage 1 runs
    `head_programs` programs per request and split (kv heads x head blocks).

    The default fills the device: max_splits = ceil(target_programs /
    (batch x head_programs)) (target_programs = PROGRAMS_PER_UNIT x the
    target's SMs / CUs / clusters), at most MAX_KV_SPLITS; each request then
    takes one split per MIN_SPLIT_TOKENS keys up to that, on the device."""
    if split_tile_size:
        return split_tile_size, max(cdiv(max_context_len, split_tile_size), 1)
    if num_kv_splits:
        return 1, num_kv_splits
    cap = cdiv(plan.target_programs, max(batch * head_programs, 1))
    return plan.min_split_tokens, max(1, min(cap, plan.max_kv_splits))


def head_programs(plan: AttentionPlan, q_heads: int, kv_heads: int) -> int:
    """Stage-1 programs per request and split: kv heads x blocks of a group's heads."""
    return kv_heads * cdiv(q_heads // kv_heads, plan.block_h)


def splits_used(n_keys: int, split_tokens: int, max_splits: int, block_n: int) -> int:
    """Non-empty splits of a request with n visible keys (`split_range`'s count)."""
    splits = min(max(cdiv(n_keys, split_tokens), 1), max_splits)
    split_len = max(cdiv(cdiv(n_keys, splits), block_n), 1) * block_n
    return cdiv(n_keys, split_len)


def decode_traffic(lens, q_heads: int, kv_heads: int, head_dim: int, v_dim: int, elt: int, splits,
                   kv_elt: int | None = None, *, v_in_k: bool = False, index_elt: int = 4) -> int:  # fmt: skip
    """Bytes one split-KV decode call moves, for requests of `lens` keys
    split into ``splits[b]`` non-empty ranges (SGLang's grouped kernels
    share the structure, so this counts theirs too): each (request, kv head,
    split) program reads its keys' slot ids, K and V rows once and the
    group's q rows, and writes the group's partials (v_dim + 1 fp32 each);
    stage 2 reads the partials back and writes o. `kv_elt`: bytes per
    cached K/V value when the pool's dtype is not the compute dtype (fp8: 1).
    `v_in_k`: V is taken from the loaded K rows (MLA's latent, read once);
    `index_elt`: bytes per slot id (SGLang's backend: int64)."""
    keys = sum(lens)
    partials = q_heads * sum(splits)
    kv_elt = elt if kv_elt is None else kv_elt
    row = head_dim if v_in_k else head_dim + v_dim
    return (keys * kv_heads * (row * kv_elt + index_elt)  # slot ids, K and V
            + partials * head_dim * elt  # q rows, once per split
            + 2 * partials * (v_dim + 1) * 4  # partials written, read back
            + len(lens) * q_heads * v_dim * elt)  # o  # fmt: skip


def decode_workspace(batch: int, q_heads: int, kv_heads: int, head_dim: int, v_head_dim: int, device, *,
                     num_kv_splits: int | None = None, split_tile_size: int | None = None,
                     max_context_len: int | None = None, config: dict | None = None) -> DecodeWorkspace:  # fmt: skip
    """The partials and split plan `decode_attention` uses for `batch`
    requests (its default policy, `num_kv_splits` per request at most, or
    fixed tiles of `split_tile_size` keys, which needs `max_context_len`)."""
    where = "decode_workspace"
    for name, value in (("batch", batch), ("q_heads", q_heads), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("v_head_dim", v_head_dim)):  # fmt: skip
        require_number(where, name, value, minimum=1, integer=True)
    if q_heads % kv_heads:  # the head split decode_attention refuses (shared.py): no workspace for it either
        raise ValueError(f"{where}: q_heads {q_heads} is not a multiple of kv_heads {kv_heads}")
    if num_kv_splits is not None and split_tile_size is not None:
        raise ValueError(f"{where}: give num_kv_splits or split_tile_size, not both")
    if num_kv_splits is not None:
        require_number(where, "num_kv_splits", num_kv_splits, minimum=1, integer=True)
    if split_tile_size is not None:
        require_number(where, "split_tile_size", split_tile_size, minimum=1, integer=True)
        require_number(where, "max_context_len", max_context_len, minimum=1, integer=True)
    tokens, splits = decode_split_plan(batch, q_heads, kv_heads, head_dim, v_head_dim, num_kv_splits=num_kv_splits,
                                       split_tile_size=split_tile_size, max_context_len=max_context_len, config=config)
    part_out = torch.empty(batch, q_heads, splits, v_head_dim, dtype=torch.float32, device=device)
    part_lse = torch.empty(batch, q_heads, splits, dtype=torch.float32, device=device)
    return DecodeWorkspace(part_out, part_lse, tokens)


def decode_split_plan(batch: int, q_heads: int, kv_heads: int, head_dim: int, v_head_dim: int, *,
                      num_kv_splits: int | None = None, split_tile_size: int | None = None,
                      max_context_len: int | None = None, config: dict | None = None) -> tuple[int, int]:  # fmt: skip
    """(split_tokens, max_splits) `decode_workspace` chooses, without allocating:
    a graph capture sizes one scratch for every batch size from it."""
    plan = _plan(config, torch.float32, head_dim, v_head_dim, q_heads // kv_heads, None)
    return split_policy(plan, batch, head_programs(plan, q_heads, kv_heads), num_kv_splits, split_tile_size,
                        max_context_len)  # fmt: skip


def check_workspace(workspace, batch: int, q_heads: int, v_dim: int, device) -> None:
    part_out, part_lse = workspace.part_out, workspace.part_lse
    if (part_out.dtype != torch.float32 or part_out.dim() != 4 or part_out.shape[0] < batch
            or part_out.shape[1] != q_heads or part_out.shape[3] != v_dim or not part_out.is_contiguous()):
        raise ValueError(f"{OP}: workspace.part_out must be contiguous fp32 [>= {batch}, {q_heads}, splits, {v_dim}], "
                         f"got {part_out.dtype} {tuple(part_out.shape)}")  # fmt: skip
    if part_lse.dtype != torch.float32 or part_lse.shape != part_out.shape[:3] or not part_lse.is_contiguous():
        raise ValueError(f"{OP}: workspace.part_lse must be contiguous fp32 {tuple(part_out.shape[:3])}, "
                         f"got {part_lse.dtype} {tuple(part_lse.shape)}")  # fmt: skip
    require_number(OP, "workspace.split_tokens", workspace.split_tokens, minimum=1, integer=True)
    if part_out.device != device or part_lse.device != device:
        raise ValueError(f"{OP}: the workspace is on {part_out.device} but q is on {device}")
