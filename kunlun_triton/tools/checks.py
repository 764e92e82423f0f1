"""The record types the tools exchange with each op family."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class OpCheck:
    """One op on one small input: `run` calls the public op, `reference` the
    torch oracle; both return a tensor (or a tuple of tensors) to compare.
    `compare` replaces the elementwise comparison where outputs are random
    (sampling): it returns (error, ok)."""

    op: str
    run: Callable[[], object]
    reference: Callable[[], object]
    dtype: torch.dtype = torch.float32
    atol: float | None = None
    rtol: float | None = None
    compare: Callable[[object, object], tuple[float, bool]] | None = None


@dataclass
class BenchCase:
    """One shape of one op, with each implementation as a no-argument thunk.

    `bytes_moved` is what an ideal kernel reads and writes once (for GB/s and
    the fraction of peak). `baseline` names the impl the others are compared
    with (ratio = baseline time / impl time, so > 1 means faster)."""

    family: str
    op: str
    params: dict
    impls: dict[str, Callable[[], object]]
    bytes_moved: int = 0
    flops: int = 0
    baseline: str = "torch"
    x_axis: str = ""  # the param to plot against (e.g. "context_len")
    tags: dict = field(default_factory=dict)
