"""SGLang's batch-invariant ops mode (``--enable-deterministic-inference``) on
the kunlun platform.

On a card (device ``cuda``: CUDA, HIP, Kunlun's vendor torch) SGLang's own
``enable_batch_invariant_mode`` runs unchanged: its Triton persistent GEMM,
log-softmax and mean kernels replace ``aten::mm`` / ``addmm`` /
``_log_softmax`` / ``mean.dim`` for the device.

In CPU development mode SGLang refuses (``get_dispatch_device_backend``
knows no CPU), so the platform registers the mode for the ``CPU`` key
itself: SGLang's log-softmax and mean kernels (per row, under the Triton
interpreter), and for the GEMMs one fixed-shape host GEMV per row. SGLang's
persistent GEMM kernel is not used on the host: under the interpreter its
``tl.dot`` is numpy's matmul, whose rounding may depend on the row's lane in
the tile (it did with one build machine's BLAS, not with another's: it is
the BLAS's choice), so a request's logits could change with its position in
the batch. The per-row GEMV is invariant on every CPU.

Deterministic sampling: SGLang then forces its ``pytorch`` sampler, whose
seeded Gumbel draw hashes (seed, position, vocabulary id) with
``murmur_hash32``; for CPU tensors that calls sgl_kernel's CPU build, which a
CUDA wheel lacks. Development mode runs SGLang's own Triton hash kernel
(under the interpreter) instead: the same hash, per row.
"""

from __future__ import annotations

import logging

import torch

from ..platform.mode import dev_mode

logger = logging.getLogger("kunlun_triton.sglang_plugin")

_LIBRARY = None  # the torch.library registration, kept alive for the process


def _rows_gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b one row at a time (aten::mv, the same shape for every row): a
    row's result never depends on the other rows."""
    out = a.new_empty((a.shape[0], b.shape[1]))
    bt = b.t()
    for i in range(a.shape[0]):
        torch.mv(bt, a[i], out=out[i])
    return out


def _mm(a, b):
    return _rows_gemm(a, b)


def _mm_out(a, b, *, out):
    return out.copy_(_rows_gemm(a, b))


def _addmm(bias, a, b, *, beta=1, alpha=1):
    prod = _rows_gemm(a, b)
    if alpha != 1:
        prod = prod * alpha
    return prod + (bias if beta == 1 else bias * beta)


def enable_on_host() -> None:
    """Batch-invariant mode for CPU tensors (development mode); idempotent."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    from sglang.srt.batch_invariant_ops import batch_invariant_ops as sglang_ops

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("aten::mm", _mm, "CPU")
    lib.impl("aten::mm.out", _mm_out, "CPU")
    lib.impl("aten::addmm", _addmm, "CPU")
    lib.impl("aten::_log_softmax", sglang_ops._log_softmax_batch_invariant, "CPU")
    lib.impl("aten::mean.dim", sglang_ops.mean_batch_invariant, "CPU")
    _LIBRARY = lib
    logger.info("kunlun-triton: batch-invariant ops on the host (row GEMV; SGLang's log-softmax and mean kernels)")


def disable_on_host() -> None:
    """Undo `enable_on_host` (tests)."""
    global _LIBRARY
    if _LIBRARY is not None:
        _LIBRARY._destroy()
        _LIBRARY = None


def enable_batch_invariant_mode(original, *args, **kwargs):
    """AROUND hook of SGLang's ``enable_batch_invariant_mode`` (applied only
    on the active kunlun platform): development mode registers the host ops
    above; a card runs SGLang's own."""
    if dev_mode():
        enable_on_host()
        return None
    return original(*args, **kwargs)


def murmur_hash32(original, seed, positions, col_indices):
    """AROUND hook of SGLang's ``murmur_hash32``: host tensors in development
    mode go through SGLang's Triton kernel, as device tensors do."""
    if not (dev_mode() and seed.device.type == "cpu"):
        return original(seed, positions, col_indices)
    return _host_murmur_hash32(seed, positions, col_indices)


@torch.compiler.disable  # called from SGLang's torch.compile'd sampler; the interpreter is not traceable
def _host_murmur_hash32(seed, positions, col_indices):
    import triton
    from sglang.kernels.ops.sampling.murmur_hash import murmur_hash32_kernel

    n, m = seed.shape[0], col_indices.shape[0]
    hashed = torch.empty((n, m), dtype=torch.uint32, device=seed.device)
    block = 1024  # SGLang's launch
    murmur_hash32_kernel[(n, triton.cdiv(m, block))](seed, positions, col_indices, hashed, n, m, BLOCK_SIZE=block)
    return hashed
