"""Input checks shared by the row-wise op families (norm, activation, rope).

Every check raises before any kernel runs, and names the argument: TypeError
for a wrong type or dtype, ValueError for a wrong device, rank, shape or
layout.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)

# One program holds a whole row in one tile; wider rows would need a looped
# kernel, which no model in our presets needs (largest hidden size: 16384).
MAX_ROW_WIDTH = 65536


def _names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(t, name: str, dtypes=FLOAT_DTYPES, min_dim: int = 1, max_dim: int | None = None) -> None:
    """`t` is a tensor of one of `dtypes` with min_dim..max_dim dims and a contiguous last dim."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} has dtype {t.dtype}; expected one of {_names(dtypes)}")
    if t.dim() < min_dim or (max_dim is not None and t.dim() > max_dim):
        wanted = f"{min_dim}" if max_dim == min_dim else f"{min_dim}..{max_dim or 'any'}"
        raise ValueError(f"{name} has {t.dim()} dims {tuple(t.shape)}; expected {wanted}")
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dim (stride 1), got strides {t.stride()}")


def check_same_device(**tensors) -> torch.device:
    """All named tensors on one device; returns it."""
    items = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}")
    return first.device


def check_row_width(width: int, name: str) -> None:
    if width > MAX_ROW_WIDTH:
        raise ValueError(f"{name} rows are {width} wide; at most {MAX_ROW_WIDTH} are supported")


def as_rows(t: torch.Tensor, name: str, writable: bool = False) -> torch.Tensor:
    """`t` as a [rows, width] view sharing its storage (row stride may exceed width).

    Leading dims are flattened. When they cannot be (an odd layout), a read-only
    input is copied; an input written in place raises instead.
    """
    width = t.shape[-1]
    try:
        rows = t.view(-1, width)
    except RuntimeError:
        rows = None
    if rows is None and writable:
        raise ValueError(
            f"{name} is written in place, so its leading dims must flatten to rows without a copy; "
            f"got shape {tuple(t.shape)} with strides {t.stride()}"
        )
    if rows is None:
        return t.reshape(-1, width)
    if writable and rows.shape[0] > 1 and rows.stride(0) < width:
        raise ValueError(f"{name} is written in place but its rows overlap (strides {t.stride()})")
    return rows


def power_of_two_at_most(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)
