"""Constexprs passed by position: the cheap way to call ``kernel[grid](...)``.

Triton binds a launch's arguments with a function built from the kernel's
signature; keywords cost it (and the ``kernel[grid]`` wrapper, which repacks
them) far more than positions. A stubbed launch of sampling's
``block_stats_kernel`` (10 runtime arguments, 7 constexprs, ``num_warps``)
takes 2.7 us with the constexprs by keyword and 1.1 us by position on the
build machine (``torch.empty((8, 4096))``: 2.0 us there), and a real launch
binds the same way. So a launcher's cached plan holds its constexprs as the
kernel's positional tail, built by name here once per plan, and a call is
``kernel[grid](*runtime_args, *plan.constexprs, **plan.launch)``.
"""

from __future__ import annotations


def constexpr_args(kernel, **values) -> tuple:
    """`values` (constexprs by name) in the order of `kernel`'s signature,
    which must end with exactly those parameters: the positional tail of a
    launch whose runtime arguments come first."""
    names = kernel.arg_names
    tail = names[len(names) - len(values):]
    if len(values) > len(names) or set(tail) != set(values):
        raise TypeError(f"{kernel.fn.__name__}: its signature ends with {tail}, not with the constexprs "
                        f"{sorted(values)}")  # fmt: skip
    return tuple(values[name] for name in tail)
