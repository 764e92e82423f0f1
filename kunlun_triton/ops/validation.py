"""Input checks for every public op: one vocabulary, and every error names
the op and the argument (``rms_norm: x has dtype int32; expected ...``).

TypeError for a wrong type or dtype; ValueError for a wrong device, rank,
shape, layout or value. The `require_*` checks read tensor metadata only
and always run. The `check_*` value checks read device tensors back to the
host (a sync on a device), so ops run them in checked mode only: on by
default (``check=True``), off per call with ``check=False`` or everywhere
with ``KUNLUN_TRITON_CHECK=0``. Every check runs before any output is
written, so a call that raises changes nothing.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..runtime.dtypes import FLOAT_DTYPES, INDEX_DTYPES, dtype_names
from ..runtime.env import cached_flag

_checks_enabled = cached_flag("KUNLUN_TRITON_CHECK", True)


def checked_mode(check: bool) -> bool:
    """Whether value checks run for this call: ``check`` and not ``KUNLUN_TRITON_CHECK=0``."""
    return bool(check) and _checks_enabled()


def require_tensor(
    op: str,
    name: str,
    t,
    *,
    dtypes=FLOAT_DTYPES,
    ndim: int | None = None,
    min_ndim: int = 0,
    max_ndim: int | None = None,
    last_dim_contiguous: bool = True,
) -> None:
    """`t` is a tensor of one of `dtypes`, with `ndim` (or min..max) dims and,
    unless told otherwise, a contiguous last dim. (Every op call runs a few
    of these: the common case asks each property once.)"""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{op}: {name} has dtype {t.dtype}; expected one of {dtype_names(dtypes)}")
    dims = t.dim()
    if ndim is not None and dims != ndim:
        raise ValueError(f"{op}: {name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if dims < min_ndim or (max_ndim is not None and dims > max_ndim):
        wanted = f"{min_ndim}..{max_ndim if max_ndim is not None else 'any'}"
        raise ValueError(f"{op}: {name} must have {wanted} dims, got shape {tuple(t.shape)}")
    if last_dim_contiguous and dims and t.stride(-1) != 1 and t.shape[-1] > 1 and t.numel():
        raise ValueError(f"{op}: {name} must be contiguous in its last dim, got strides {t.stride()}")


def require_index_tensor(op: str, name: str, t, ndim: int = 1) -> None:
    require_tensor(op, name, t, dtypes=INDEX_DTYPES, ndim=ndim)


def require_same(op: str, what: str, **values) -> None:
    """All named values equal (shapes, dtypes, sizes); the error lists each."""
    items = list(values.values())
    if any(v != items[0] for v in items[1:]):
        listed = ", ".join(f"{k}={v}" for k, v in values.items())
        raise ValueError(f"{op}: {what} must match: {listed}")


def require_same_device(op: str, **tensors) -> torch.device:
    """All named tensors (None ones skipped) on one device; returns it."""
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{k} on {v}" for k, v in devices.items())
        raise ValueError(f"{op}: all tensors must be on one device: {listed}")
    return next(iter(devices.values()))


def require_number(
    op: str,
    name: str,
    value,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
):
    """A real number (Python or numpy scalar, never a bool or NaN or inf),
    at least `minimum`, strictly above `above`, at most `maximum`; an int
    when `integer`. Returns it as a Python int or float."""
    if type(value) is (int if integer else float):  # the common case, without the ABC check
        pass
    elif isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real):
        raise TypeError(f"{op}: {name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    value = int(value) if integer else float(value)
    if not math.isfinite(value):
        raise ValueError(f"{op}: {name} must be finite, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{op}: {name} must be >= {minimum}, got {value!r}")
    if above is not None and value <= above:
        raise ValueError(f"{op}: {name} must be > {above}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{op}: {name} must be <= {maximum}, got {value!r}")
    return value


def require_choice(op: str, name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{op}: {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def as_rows(op: str, name: str, t: torch.Tensor, writable: bool = False) -> torch.Tensor:
    """`t` as a [rows, width] view sharing its storage (row stride may exceed width).

    Leading dims are flattened. When they cannot be (an odd layout), a read-only
    input is copied; an input written in place raises instead.
    """
    if t.dim() == 2 and (not writable or t.shape[0] <= 1 or t.stride(0) >= t.shape[1]):
        return t  # already rows
    width = t.shape[-1]
    n_rows = math.prod(t.shape[:-1])  # explicit: view(-1, 0) is ambiguous for an empty last dim
    try:
        rows = t.view(n_rows, width)
    except RuntimeError:
        rows = None
    if rows is None and writable:
        raise ValueError(
            f"{op}: {name} is written in place, so its leading dims must flatten to rows without a copy; "
            f"got shape {tuple(t.shape)} with strides {t.stride()}"
        )
    if rows is None:
        return t.reshape(n_rows, width)
    if writable and rows.shape[0] > 1 and rows.stride(0) < width:
        raise ValueError(f"{op}: {name} is written in place but its rows overlap (strides {t.stride()})")
    return rows


def check_indptr(op: str, name: str, indptr: torch.Tensor, batch: int, limit: int, limit_name: str) -> torch.Tensor:
    """`indptr` has batch + 1 non-decreasing entries from >= 0 up to <= `limit`;
    returns its values on the host (int64)."""
    if indptr.numel() != batch + 1:
        raise ValueError(f"{op}: {name} must have batch + 1 = {batch + 1} entries, got {indptr.numel()}")
    values = indptr.detach().cpu().long()
    if values.numel() and values[0] < 0:
        raise ValueError(f"{op}: {name}[0] = {int(values[0])} is negative")
    steps = values[1:] - values[:-1]
    if (steps < 0).any():
        i = int(torch.nonzero(steps < 0)[0])
        raise ValueError(
            f"{op}: {name} must be non-decreasing; {name}[{i}] = {int(values[i])} > {name}[{i + 1}] = {int(values[i + 1])}"
        )
    if values.numel() and values[-1] > limit:
        raise ValueError(f"{op}: {name}[-1] = {int(values[-1])} exceeds {limit_name} = {limit}")
    return values


def check_slots(op: str, name: str, slots: torch.Tensor, num_slots: int, used: int | None = None) -> None:
    """Slot ids slots[:used] lie in [0, num_slots)."""
    values = slots.detach()[: slots.numel() if used is None else used]
    if values.numel() == 0:
        return
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= num_slots:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{op}: {name} holds slot id {bad}, outside the pool's [0, {num_slots})")


def power_of_two_at_most(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def rows_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a` and `b` share an element, for tensors whose rows (dim 0)
    are each one contiguous block (1-D: one element a row) with one row
    stride: a fused qkv buffer's q and k views interleave without sharing,
    a view of q itself or a key cut across the query's rows does share.
    Other layouts are compared by start only (identical views)."""
    if a.numel() == 0 or b.numel() == 0 or a.is_meta or b.is_meta:  # meta tensors (planning) hold no memory
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    if a.data_ptr() == b.data_ptr():
        return True
    if a.dim() == 0 or b.dim() == 0 or (a.dim() > 1 and not a[0].is_contiguous()) or \
            (b.dim() > 1 and not b[0].is_contiguous()):  # fmt: skip
        return False
    stride = a.stride(0) * a.element_size()
    if stride != b.stride(0) * b.element_size() and not (a.shape[0] == 1 or b.shape[0] == 1):
        return False
    wa, wb = a[0].numel() * a.element_size(), b[0].numel() * b.element_size()
    na, nb, d = a.shape[0], b.shape[0], b.data_ptr() - a.data_ptr()
    if na == 1 or nb == 1 or stride == 0:  # compare each row of the other against the single one
        rows_a = [a.data_ptr() + i * a.stride(0) * a.element_size() for i in range(na if nb == 1 else 1)]
        rows_b = [b.data_ptr() + j * b.stride(0) * b.element_size() for j in range(nb if na == 1 else 1)]
        return any(ra < rb + wb and rb < ra + wa for ra in rows_a for rb in rows_b)
    # rows i of a and j of b meet iff -wb < d + (j - i) * stride < wa for some j - i in [1 - na, nb - 1]
    lo, hi = (-wb - d) // stride + 1, -((d - wa) // stride) - 1
    return max(lo, 1 - na) <= min(hi, nb - 1)


def require_disjoint(op: str, written: str, w: torch.Tensor, others: dict) -> None:
    """ValueError naming both when `w` (written by `op`) shares memory with any of `others`."""
    for name, t in others.items():
        if t is not None and rows_overlap(w, t):
            raise ValueError(f"{op}: {written} and {name} share memory; {written} is written in place "
                             f"(they must be separate tensors, or views that do not overlap)")  # fmt: skip
