"""Checked mode's description of one call, and the rules by which the
ranks' descriptions agree.

A description is a fixed-length row of integers, the same length for every
collective of a group (so that the exchange itself, one all-gather of the
rows, never mismatches): collective, dtype, extra (op / dim / src), ndim,
eight dims (the eighth holds the product of the rest), a problem flag (this
rank's arguments were refused locally), then two lists of ``world_size``
integers for the uneven collectives (``all_to_all``: send and receive splits;
``all_gatherv`` / ``reduce_scatterv``: the per-rank sizes), -1 elsewhere.

Even collectives agree when every row is equal. The uneven ones allow what
legitimately differs: ``all_to_all`` and ``all_gatherv`` ranks pass different
row counts (dim 0), ``all_to_all`` ranks different splits; then rank r's
receive split from s must be what s sends to r."""

from __future__ import annotations

import math
import numbers

import torch
import torch.distributed as dist

OP_NAMES = ("sum", "max", "min", "product")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
               "all_to_all", "all_gatherv", "reduce_scatterv")
UNEVEN_ROWS = ("all_to_all", "all_gatherv")  # dim 0 differs between ranks
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)
MAX_DIMS = 8
HEAD = 4 + MAX_DIMS  # collective, dtype, extra, ndim, dims
_PROBLEM = HEAD
_DIM0 = 4


def row_length(world: int) -> int:
    return HEAD + 1 + 2 * world


def op_code(op) -> int:
    """1.. for a known reduction, 0 for anything else (refused after the exchange)."""
    return OP_NAMES.index(op) + 1 if op in OP_NAMES else 0


def dim_code(tensor, dim) -> int:
    """``dim`` counted from 0 (-1 and ndim-1 agree); out of range: as given."""
    n = tensor.dim()
    return dim % n if isinstance(dim, int) and n and -n <= dim < n else (dim if isinstance(dim, int) else -99)


def check_dim(collective: str, tensor, dim) -> None:
    n = tensor.dim()
    if isinstance(dim, bool) or not isinstance(dim, int) or not -max(n, 1) <= dim < max(n, 1):
        raise ValueError(f"{collective}: dim {dim!r} is out of range for a {n}-D tensor")


def reduce_op(op: str):
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}
    if op == "avg":
        raise ValueError("op='avg' is not portable across backends; sum and divide by world_size")
    if op not in ops:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(ops)}")
    return ops[op]


def as_splits(splits, world: int, collective: str, name: str) -> list[int]:
    """``splits`` (a list / tuple of ints or a 1-D integer tensor) as a list of
    ``world`` non-negative ints; ValueError naming ``name`` otherwise."""
    if isinstance(splits, torch.Tensor):
        if splits.dim() != 1 or splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError(f"{collective}: {name} must be a 1-D integer tensor or a list of ints, "
                             f"got a {splits.dim()}-D {splits.dtype} tensor")
        splits = splits.tolist()
    if not isinstance(splits, (list, tuple)) or not all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in splits):
        raise ValueError(f"{collective}: {name} must be a list of ints, got {splits!r}"[:300])
    if len(splits) != world:
        raise ValueError(f"{collective}: {name} has {len(splits)} entries for a group of {world} ranks")
    if any(s < 0 for s in splits):
        raise ValueError(f"{collective}: {name} {list(splits)} has a negative entry")
    return [int(s) for s in splits]


def describe(collective: str, tensor, extra: int, world: int, problem: bool = False, a=None, b=None) -> list[int]:
    """A fixed-length description of one call (same length on every rank)."""
    row = [COLLECTIVES.index(collective), -1, int(extra), -1] + [-1] * MAX_DIMS + [int(problem)]
    if tensor is not None:
        shape = list(tensor.shape)
        if len(shape) > MAX_DIMS:
            shape = shape[: MAX_DIMS - 1] + [math.prod(shape[MAX_DIMS - 1 :])]
        row[1] = DTYPES.index(tensor.dtype) if tensor.dtype in DTYPES else len(DTYPES)
        row[3] = tensor.dim()
        row[4 : 4 + len(shape)] = shape
    for values in (a, b):
        fits = values is not None and len(values) == world and all(isinstance(v, int) for v in values)
        row += list(values) if fits else [-1 if values is None else -2] * world
    return row


def disagreement(rows: list[list[int]], world: int) -> str | None:
    """Why the ranks' rows do not describe one collective call, or None."""
    name = COLLECTIVES[rows[0][0]] if 0 <= rows[0][0] < len(COLLECTIVES) else "?"
    a, b = slice(HEAD + 1, HEAD + 1 + world), slice(HEAD + 1 + world, HEAD + 1 + 2 * world)

    def key(row):
        if name not in UNEVEN_ROWS:
            return row
        masked = list(row)
        masked[_DIM0] = -1
        if name == "all_to_all":
            masked[a] = masked[b] = [-1] * world
        return masked

    bad = [r for r, row in enumerate(rows) if row[_PROBLEM]]
    if bad:
        return f"rank(s) {', '.join(map(str, bad))} passed arguments that were refused"
    if any(key(row) != key(rows[0]) for row in rows):
        return "the ranks' calls do not match"
    if name == "all_to_all":
        for r, row in enumerate(rows):
            recv = row[b]
            for s in range(world):
                if recv[s] >= 0 and recv[s] != rows[s][a][r]:
                    return f"rank {r} expects {recv[s]} rows from rank {s}, which sends it {rows[s][a][r]}"
    return None


def describe_text(row: list[int], world: int) -> str:
    name = COLLECTIVES[row[0]] if 0 <= row[0] < len(COLLECTIVES) else "?"
    if row[3] < 0:
        return f"{name}()"
    dtype = str(DTYPES[row[1]]).replace("torch.", "") if 0 <= row[1] < len(DTYPES) else "other dtype"
    shape = row[4 : 4 + min(row[3], MAX_DIMS)]
    extra = row[2]
    a, b = row[HEAD + 1 : HEAD + 1 + world], row[HEAD + 1 + world :]
    op = lambda code: OP_NAMES[code - 1] if 1 <= code <= len(OP_NAMES) else "unknown op"  # noqa: E731
    splits = lambda s: "invalid" if s and s[0] == -2 else ("not given" if s and s[0] == -1 else str(s))  # noqa: E731
    arg = {"all_reduce": lambda: op(extra), "broadcast": lambda: f"src {extra}", "all_gather": lambda: f"dim {extra}",
           "reduce_scatter": lambda: f"dim {extra // 8}, {op(extra % 8)}",
           "all_to_all": lambda: f"send_splits {splits(a)}, recv_splits {splits(b)}",
           "all_gatherv": lambda: f"sizes {splits(a)}",
           "reduce_scatterv": lambda: f"sizes {splits(a)}, {op(extra)}"}.get(name, lambda: str(extra))()
    refused = ", refused locally" if row[HEAD] else ""
    return f"{name}({dtype}{shape}, {arg}{refused})"
