"""The attention backend's metadata (`attention.py`): per step, from
SGLang's ``ForwardBatch``, each request's KV slots read out of
``req_to_token``; the decode graphs' buffers and split-KV scratch; the
deterministic-inference settings SGLang's server arguments give."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from ...ops.attention.decode_splits import DecodeWorkspace, decode_split_plan
from ...runtime.env import env_int
from ..speculative.phases import note_forward


@dataclass
class KunlunAttnMetadata:
    kv_indptr: torch.Tensor  # int32 [bs + 1]
    kv_indices: torch.Tensor  # int32: decode: whole sequence; extend: prefix only
    qo_indptr: Optional[torch.Tensor] = None  # int32 [bs + 1], extend only
    max_len_extend: int = 0
    # decode: the step's split-KV scratch per (q heads, kv heads, head dim, v head dim)
    workspaces: dict = field(default_factory=dict)
    graph_batch: int = 0  # > 0: a graph's metadata, views of GraphState for this batch size
    # target verify with a draft tree: flat bool mask, request b's (draft x (prefix + draft))
    # block at mask_indptr[b]; None for a chain (causal) and every other mode
    custom_mask: Optional[torch.Tensor] = None
    mask_indptr: Optional[torch.Tensor] = None
    unified_kv: bool = False  # kv_indices cover the whole sequence (deterministic extend)
    phase: Optional[str] = None  # speculative phase (target_verify, draft_extend, draft_decode) or None


@dataclass
class GraphState:
    """Decode-graph buffers, allocated once for the largest captured batch."""

    kv_indptr: torch.Tensor  # int32 [max_bs + 1]
    kv_indices: torch.Tensor  # int32 [max_bs * max_len]
    max_bs: int
    scratch: dict = field(default_factory=dict)  # layer dims -> (flat part_out, flat part_lse)


def gather_kv_indices(req_to_token, req_pool_indices, lengths, total: int):
    """(indptr, indices): request b's first lengths[b] slots of req_to_token."""
    device = req_to_token.device
    lengths = lengths.to(device=device, dtype=torch.int64)
    indptr = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=device)
    torch.cumsum(lengths, dim=0, out=indptr[1:])
    if total == 0:
        return indptr.to(torch.int32), torch.empty(0, dtype=torch.int32, device=device)
    rows = torch.repeat_interleave(req_pool_indices.to(device=device, dtype=torch.int64), lengths, output_size=total)
    starts = torch.repeat_interleave(indptr[:-1], lengths, output_size=total)
    cols = torch.arange(total, dtype=torch.int64, device=device) - starts
    indices = req_to_token[rows, cols].to(torch.int32)
    return indptr.to(torch.int32), indices


def _cached_rows(buffer, loc, scale, dtype):
    """Rows `loc` of a pool as values in the compute dtype (an fp8 pool's
    bytes decoded by torch, times its scale)."""
    if buffer.dtype == dtype:
        return buffer[loc]
    values = buffer.view(torch.uint8)[loc].view(buffer.dtype).to(torch.float32)
    return (values * (1.0 if scale is None else scale)).to(dtype)


def _latent_of(k, v, check):
    """The new tokens' V of an absorbed MLA extend as the kernel reads it
    once: SGLang passes v = k_nope, a copy of the first kv_lora_rank values of
    k = cat(k_nope, k_pe); the same values as a view of k's rows let
    extend_attention take V from the K tile (NEW_V_IN_K). Checked mode
    verifies they are the same values (NaN for NaN)."""
    latent = k[..., : v.shape[-1]]
    if check and not bool(((latent == v) | (latent.isnan() & v.isnan())).all()):
        raise ValueError("kunlun_triton attention: MLA extend: v_extend is not k_extend[..., :kv_lora_rank] "
                         "(SGLang's absorbed MLA passes k_nope, the latent part of k)")  # fmt: skip
    return latent


def _cpu_list_or(tensor, cpu_list):
    return list(cpu_list) if cpu_list is not None else tensor.tolist()


def deterministic_inference() -> bool:
    from sglang.srt.runtime_context import get_exec

    try:
        return bool(get_exec().deterministic.enable_deterministic_inference)
    except Exception:  # no server context (a backend built outside an engine)
        return False


def deterministic_split_tile_size() -> int:
    """Keys per decode split under deterministic inference: SGLang's own
    choice for its Triton backend (server arg, else its env var, else 256)."""
    from sglang.srt.runtime_context import get_exec

    try:
        tile = get_exec().kernel.triton_attention_split_tile_size
    except Exception:
        tile = None
    return int(tile or env_int("SGLANG_TRITON_DECODE_SPLIT_TILE_SIZE", 256))


def forward_metadata(backend, forward_batch) -> KunlunAttnMetadata:
    """The metadata of a forward step (`backend`'s fields: its request table,
    deterministic mode, speculative shape), per SGLang's forward mode."""
    mode = forward_batch.forward_mode
    req_to_token = backend.req_to_token_pool.req_to_token
    spec_info = getattr(forward_batch, "spec_info", None)
    if mode.is_decode_or_idle() and getattr(spec_info, "kv_indptr", None) is not None:
        # a draft decode step: the multi-step draft backend built each
        # branch's kv indices (its prefix and its own draft tokens so far)
        kv_indptr = spec_info.kv_indptr.to(torch.int32)
        note_forward("draft_decode", kv_indptr.numel() - 1)
        return KunlunAttnMetadata(kv_indptr, spec_info.kv_indices.to(torch.int32), phase="draft_decode")
    if mode.is_decode_or_idle():
        total = forward_batch.seq_lens_sum
        if total is None:
            total = int(forward_batch.seq_lens.sum())
        kv_indptr, kv_indices = gather_kv_indices(
            req_to_token, forward_batch.req_pool_indices, forward_batch.seq_lens, int(total)
        )
        return KunlunAttnMetadata(kv_indptr, kv_indices)
    if mode.is_target_verify():
        meta = verify_metadata(backend, forward_batch)
        note_forward("target_verify", forward_batch.req_pool_indices.numel())
        return meta
    draft_extend = mode.is_draft_extend_v2() or mode.name == "DRAFT_EXTEND"  # v2; v1 in older SGLang
    if not (mode.is_extend() or draft_extend):
        raise NotImplementedError(f"kunlun_triton attention: forward mode {mode} is not supported")
    prefix_cpu = _cpu_list_or(forward_batch.extend_prefix_lens, forward_batch.extend_prefix_lens_cpu)
    extend_cpu = _cpu_list_or(forward_batch.extend_seq_lens, forward_batch.extend_seq_lens_cpu)
    # draft extend (v1, v2) is a plain extend over the draft's cached prefix
    unified = backend.deterministic and not draft_extend
    if unified:  # unified extend: each request's whole sequence
        kv_lens, total = forward_batch.seq_lens, sum(prefix_cpu) + sum(extend_cpu)
    else:  # the prefix only; the new tokens come from k/v
        kv_lens, total = forward_batch.extend_prefix_lens, sum(prefix_cpu)
    kv_indptr, kv_indices = gather_kv_indices(req_to_token, forward_batch.req_pool_indices, kv_lens, int(total))
    ext = forward_batch.extend_seq_lens.to(device=req_to_token.device, dtype=torch.int64)
    qo_indptr = torch.zeros(ext.numel() + 1, dtype=torch.int64, device=ext.device)
    torch.cumsum(ext, dim=0, out=qo_indptr[1:])
    if draft_extend:
        note_forward("draft_extend", len(extend_cpu))
    return KunlunAttnMetadata(
        kv_indptr, kv_indices, qo_indptr.to(torch.int32), max(extend_cpu, default=0), unified_kv=unified,
        phase="draft_extend" if draft_extend else None,
    )


def verify_metadata(backend, forward_batch) -> KunlunAttnMetadata:
    """Target verify: request b's `n` draft tokens (rows b*n .. b*n + n)
    over its committed sequence (seq_lens[b] slots) with the tree's mask,
    an (n x (seq_lens[b] + n)) block at mask_indptr[b] (SGLang's layout)."""
    spec_info = forward_batch.spec_info
    req_to_token = backend.req_to_token_pool.req_to_token
    device = req_to_token.device
    bs = forward_batch.req_pool_indices.numel()
    n = int(getattr(spec_info, "num_tokens_per_req", 0) or 0)
    n = n if n > 0 else backend.num_draft_tokens or int(getattr(spec_info, "draft_token_num", 0))
    total = forward_batch.seq_lens_sum
    total = int(forward_batch.seq_lens.sum()) if total is None else int(total)
    kv_indptr, kv_indices = gather_kv_indices(req_to_token, forward_batch.req_pool_indices,
                                              forward_batch.seq_lens, total)  # fmt: skip
    qo_indptr = torch.arange(0, (bs + 1) * n, n, dtype=torch.int32, device=device)
    custom_mask = mask_indptr = None
    if not backend.chain_verify and getattr(spec_info, "custom_mask", None) is not None:
        custom_mask = spec_info.custom_mask
        mask_lens = n * (forward_batch.seq_lens[:bs].to(device=device, dtype=torch.int64) + n)
        mask_indptr = torch.zeros(bs + 1, dtype=torch.int64, device=device)
        torch.cumsum(mask_lens, dim=0, out=mask_indptr[1:])
    return KunlunAttnMetadata(kv_indptr, kv_indices, qo_indptr, n, custom_mask=custom_mask,
                              mask_indptr=mask_indptr, phase="target_verify")  # fmt: skip


def graph_workspace(backend, dims, bs, device) -> DecodeWorkspace:
    """The split-KV scratch of batch `bs` in a graph: views of one buffer
    per layer shape, sized for the largest batch."""
    heads, v_dim = dims[0], dims[3]
    plan_of = lambda b: decode_split_plan(  # noqa: E731
        b, *dims, split_tile_size=backend.split_tile_size,
        max_context_len=backend.max_context_len if backend.split_tile_size else None)  # fmt: skip
    scratch = backend.graph.scratch.get(dims)
    if scratch is None:
        rows = max(b * plan_of(b)[1] for b in range(1, backend.graph.max_bs + 1))
        scratch = backend.graph.scratch[dims] = (
            torch.empty(rows * heads * v_dim, dtype=torch.float32, device=device),
            torch.empty(rows * heads, dtype=torch.float32, device=device),
        )
    tokens, splits = plan_of(bs)
    flat_out, flat_lse = scratch
    return DecodeWorkspace(
        flat_out[: bs * heads * splits * v_dim].view(bs, heads, splits, v_dim),
        flat_lse[: bs * heads * splits].view(bs, heads, splits),
        tokens,
    )
