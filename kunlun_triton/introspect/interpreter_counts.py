"""Count what kernels do under the Triton interpreter: bytes loaded from a
given tensor and the programs each launch runs.

A device-free cost measure (docs/design.md, "What runs where"): a kernel
that reads its input N times over shows N x the input's bytes here, whatever
the machine::

    with count_loads(logits) as counts:
        ops.sample(logits, ...)
    counts.bytes            # masked-in bytes loaded from `logits`'s storage
    counts.launches         # [(kernel name, programs), ...] in launch order

Only meaningful with ``TRITON_INTERPRET=1`` (CPU tensors): it wraps the
interpreter's masked load and grid executor for the duration of the block.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field


@dataclass
class LoadCounts:
    bytes: int = 0
    launches: list = field(default_factory=list)
    bytes_by_kernel: dict = field(default_factory=dict)
    bytes_by_row: dict = field(default_factory=dict)  # with row_bytes: storage row -> bytes


@contextlib.contextmanager
def count_loads(tensor, row_bytes: int | None = None):
    """Count loads from `tensor`'s storage (the whole storage: a strided view
    counts what the kernels read of it) and every launch's program count;
    with `row_bytes` (a row's stride in bytes) also the bytes per row."""
    import numpy as np
    from triton.runtime import interpreter

    storage = tensor.untyped_storage()
    lo, hi = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
    counts = LoadCounts()
    current = ["?"]
    real_load = interpreter.InterpreterBuilder.create_masked_load
    real_call = interpreter.GridExecutor.__call__

    def load(self, ptrs, mask, other, *policy):  # (cache, eviction,) volatile: Triton 3.8 has one more than 3.9
        addresses = np.asarray(ptrs.data).astype(np.uint64)
        hit = np.asarray(mask.data, dtype=bool) & (addresses >= lo) & (addresses < hi)
        nbytes = int(hit.sum()) * (ptrs.get_element_ty().primitive_bitwidth // 8)
        counts.bytes += nbytes
        counts.bytes_by_kernel[current[0]] = counts.bytes_by_kernel.get(current[0], 0) + nbytes
        if row_bytes and nbytes:
            size = ptrs.get_element_ty().primitive_bitwidth // 8
            for row, n in zip(*np.unique((addresses[hit] - lo) // row_bytes, return_counts=True)):
                counts.bytes_by_row[int(row)] = counts.bytes_by_row.get(int(row), 0) + int(n) * size
        return real_load(self, ptrs, mask, other, *policy)

    def call(self, *args, **kwargs):
        grid = self.grid if not callable(self.grid) else None
        programs = 1
        for g in grid or ():
            programs *= int(g)
        current[0] = self.fn.__name__
        counts.launches.append((self.fn.__name__, programs))
        return real_call(self, *args, **kwargs)

    interpreter.InterpreterBuilder.create_masked_load = load
    interpreter.GridExecutor.__call__ = call
    try:
        yield counts
    finally:
        interpreter.InterpreterBuilder.create_masked_load = real_load
        interpreter.GridExecutor.__call__ = real_call
