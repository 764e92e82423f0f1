"""The launch plan of the row-wise elementwise ops (activation-and-mul,
logit_softcap): a program takes ``rows_per_program`` rows and walks each in
``block_cols``-wide tiles (no wider than the row rounded up to a power of
two), from the config's ``ROWS_PER_PROGRAM`` and ``BLOCK_COLS``."""

from __future__ import annotations

from dataclasses import dataclass

from ..runtime import capabilities, launch_options
from .launch import KernelLaunch, constexpr_args, run_keywords
from .validation import power_of_two_at_most


@dataclass(frozen=True)
class TilePlan:
    block_cols: int
    rows_per_program: int
    launch: KernelLaunch  # the kernel with its constexprs and options (`ops.launch`)


def row_tile_plan(kernel, width: int, config: dict, **constexprs) -> TilePlan:
    """The plan of `kernel`, whose signature ends with `constexprs` and
    BLOCK_COLS, ROWS_PER_PROGRAM, LOAD_IGNORES_OTHER. `config` holds both
    keys (looked up, or explicit over ``default.yaml``: their one home)."""
    block_cols = min(1 << max(width - 1, 0).bit_length(), power_of_two_at_most(config["BLOCK_COLS"]))
    rows = power_of_two_at_most(config["ROWS_PER_PROGRAM"])
    constexprs = constexpr_args(kernel, **constexprs, BLOCK_COLS=block_cols, ROWS_PER_PROGRAM=rows,
                                LOAD_IGNORES_OTHER=capabilities().load_ignores_other)  # fmt: skip
    return TilePlan(block_cols, rows, KernelLaunch(kernel, constexprs, run_keywords(launch_options(config))))
