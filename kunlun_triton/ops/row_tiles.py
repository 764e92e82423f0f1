"""The launch plan of the row-wise elementwise ops (activation-and-mul,
logit_softcap): a program takes ``rows_per_program`` rows and walks each in
``block_cols``-wide tiles (no wider than the row rounded up to a power of
two), from the config's ``ROWS_PER_PROGRAM`` and ``BLOCK_COLS``."""

from __future__ import annotations

from dataclasses import dataclass

from ..runtime import capabilities, launch_options
from .validation import power_of_two_at_most


@dataclass(frozen=True)
class TilePlan:
    block_cols: int
    rows_per_program: int
    load_ignores_other: bool
    launch: dict


def row_tile_plan(width: int, config: dict) -> TilePlan:
    block_cols = min(1 << max(width - 1, 0).bit_length(), power_of_two_at_most(config.get("BLOCK_COLS", 1024)))
    rows = power_of_two_at_most(config.get("ROWS_PER_PROGRAM", 1))
    return TilePlan(block_cols, rows, capabilities().load_ignores_other, launch_options(config))
