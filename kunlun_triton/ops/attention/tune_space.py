"""The attention family's tune search space: the candidates `kunlun-triton
tune` tries for store_kv, decode and extend, and which extend candidates a
target can run (the specs hand these to tune)."""

from __future__ import annotations

SUM_TILE_CAP = 65536  # tl.sum formulation: BLOCK_M x BLOCK_N x BLOCK_D product values per program


def _with_formulations(candidates: list[dict]) -> list[dict]:
    from ...runtime import capabilities

    if not capabilities().has_dot:
        return candidates  # the target's file picks sum
    return [{**c, "formulation": f} for c in candidates for f in ("dot", "sum")]


def store_kv_candidates(quick):
    return [{"TOKENS_PER_PROGRAM": t, "MAX_BLOCK_C": c} for t in ((1, 16) if quick else (1, 4, 16))
            for c in ((128,) if quick else (256, 1024, 4096))]  # fmt: skip


def decode_candidates(quick):
    if quick:
        return _with_formulations([{"BLOCK_N": 16, "PROGRAMS_PER_UNIT": 1, "MAX_KV_SPLITS": 1},
                                   {"BLOCK_N": 32, "PROGRAMS_PER_UNIT": 2, "MAX_KV_SPLITS": 2, "MIN_SPLIT_TOKENS": 32}])  # fmt: skip
    splits = ({"PROGRAMS_PER_UNIT": 2, "MAX_KV_SPLITS": 8}, {"PROGRAMS_PER_UNIT": 8, "MAX_KV_SPLITS": 8},
              {"PROGRAMS_PER_UNIT": 8, "MAX_KV_SPLITS": 32})  # fmt: skip
    return _with_formulations([{"BLOCK_N": n, **s} for n in (16, 32, 64) for s in splits])


def extend_candidates(quick):
    pairs = ((16, 16), (32, 16)) if quick else (
        (8, 16), (8, 32), (8, 64), (16, 8), (16, 16), (16, 32), (32, 8), (32, 16), (32, 32),
        (64, 32), (64, 64), (128, 32), (128, 64))  # fmt: skip
    return _with_formulations([{"BLOCK_M": m, "BLOCK_N": n} for m, n in pairs])


def extend_keep(candidate, shape) -> bool:
    from ...runtime import capabilities

    default = "dot" if capabilities().has_dot else "sum"
    if candidate.get("formulation", default) == "dot":  # the op raises dot tiles below 16: a different config
        return candidate["BLOCK_M"] >= 16 and candidate["BLOCK_N"] >= 16
    # the sum formulation holds a [M, D, N] product
    block_d = 1 << max(shape["head_dim"] - 1, 0).bit_length()
    return candidate["BLOCK_M"] * candidate["BLOCK_N"] * block_d <= SUM_TILE_CAP
