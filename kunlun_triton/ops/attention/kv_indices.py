"""`build_kv_indices`: a decode step's paged metadata from SGLang's request
table, on the device, for a captured graph (a helper next to
`decode_attention`, like `decode_workspace`).

    kv_indptr[0] = 0, kv_indptr[b + 1] = kv_indptr[b] + seq_lens[b]
    kv_indices[kv_indptr[b] + j] = req_to_token[req_pool_indices[b], j],  j < seq_lens[b]

Static shapes only (a cumsum, then one program per request copying its live
slot ids in BLOCK chunks): no host value, so a graph replays it for any
lengths, and it reads only the live slots (a [batch, max_len] torch
gather + scatter would read the whole table row of every request, 32k+
entries each at long contexts).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...runtime import INDEX_DTYPES, use_triton
from ..launch import KernelLaunch, run_keywords
from ..validation import checked_mode, require_disjoint, require_same_device, require_tensor
from . import reference

OP = "build_kv_indices"
BLOCK = 512  # slot ids per chunk: 2 KB of int32 per load, one program per request


@triton.jit
def build_kv_indices_kernel(req_to_token_ptr, req_pool_indices_ptr, seq_lens_ptr, kv_indptr_ptr, kv_indices_ptr,
                            row_stride, BLOCK: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    row = tl.load(req_pool_indices_ptr + b).to(tl.int64)
    n = tl.load(seq_lens_ptr + b)
    start = tl.load(kv_indptr_ptr + b).to(tl.int64)
    src = req_to_token_ptr + row * row_stride
    for j in range(0, n, BLOCK):
        offs = j + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(kv_indices_ptr + start + offs, tl.load(src + offs, mask=mask), mask=mask)


_LAUNCH = KernelLaunch(build_kv_indices_kernel, (BLOCK,), run_keywords({}))


def build_kv_indices(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor, check: bool = True):  # fmt: skip
    """Write request b's first seq_lens[b] slot ids of row req_pool_indices[b]
    of `req_to_token` [rows, max_len] into `kv_indices`, packed, and the
    offsets into `kv_indptr` [batch + 1] (int32); returns (kv_indptr,
    kv_indices). `kv_indices` must hold sum(seq_lens) entries (a graph's
    buffer holds batch * max_len).

    ``check=False`` (or ``KUNLUN_TRITON_CHECK=0``) skips every check, the
    host reads of the lengths included (what a captured graph needs): a
    length beyond the table row or the buffer then reads or writes
    unrelated memory."""
    batch = seq_lens.shape[0]
    if checked_mode(check):
        require_tensor(OP, "req_to_token", req_to_token, dtypes=INDEX_DTYPES, ndim=2)
        for name, t in (("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens), ("kv_indptr", kv_indptr),
                        ("kv_indices", kv_indices)):  # fmt: skip
            require_tensor(OP, name, t, dtypes=INDEX_DTYPES, ndim=1)
        require_same_device(OP, req_to_token=req_to_token, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                            kv_indptr=kv_indptr, kv_indices=kv_indices)  # fmt: skip
        if req_pool_indices.shape[0] != batch or kv_indptr.shape[0] != batch + 1:
            raise ValueError(f"{OP}: req_pool_indices [{batch}] and kv_indptr [{batch + 1}] must match seq_lens, "
                             f"got {tuple(req_pool_indices.shape)} and {tuple(kv_indptr.shape)}")  # fmt: skip
        inputs = {"req_to_token": req_to_token, "req_pool_indices": req_pool_indices, "seq_lens": seq_lens}
        require_disjoint(OP, "kv_indptr", kv_indptr, {"kv_indices": kv_indices, **inputs})
        require_disjoint(OP, "kv_indices", kv_indices, inputs)
        if kv_indptr.dtype != torch.int32 or kv_indices.dtype != torch.int32:
            raise ValueError(f"{OP}: kv_indptr and kv_indices are int32, got {kv_indptr.dtype} and {kv_indices.dtype}")
        if batch:
            rows, max_len = req_to_token.shape
            lens, ids = seq_lens.long(), req_pool_indices.long()
            if bool((lens < 0).any()) or int(lens.max()) > max_len:
                raise ValueError(f"{OP}: seq_lens must lie in [0, {max_len}] (the table's row length)")
            if bool((ids < 0).any()) or int(ids.max()) >= rows:
                raise ValueError(f"{OP}: req_pool_indices must lie in [0, {rows})")
            if int(lens.sum()) > kv_indices.shape[0]:
                raise ValueError(f"{OP}: kv_indices holds {kv_indices.shape[0]} entries, the lengths need "
                                 f"{int(lens.sum())}")  # fmt: skip
        tensors = (req_to_token, req_pool_indices, seq_lens, kv_indptr, kv_indices)
    else:
        tensors = (seq_lens,)
    kv_indptr[:1].zero_()
    if batch == 0:
        return kv_indptr, kv_indices
    kv_indptr[1:].copy_(torch.cumsum(seq_lens, 0))
    if not use_triton(OP, *tensors):
        reference.build_kv_indices(req_to_token, req_pool_indices, seq_lens, kv_indptr, kv_indices)
        return kv_indptr, kv_indices
    _LAUNCH((batch,), req_to_token, req_pool_indices, seq_lens, kv_indptr, kv_indices, req_to_token.stride(0))
    return kv_indptr, kv_indices
