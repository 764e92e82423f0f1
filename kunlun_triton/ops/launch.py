"""How a launcher calls a kernel cheaply: constexprs by position, and
``kernel.run`` instead of ``kernel[grid]``.

Triton binds a launch's arguments with a function built from the kernel's
signature; keywords cost it (and the ``kernel[grid]`` wrapper, which repacks
them) far more than positions. A stubbed launch of sampling's
``block_stats_kernel`` (10 runtime arguments, 7 constexprs, ``num_warps``)
takes 2.7 us with the constexprs by keyword and 1.1 us by position on the
build machine (``torch.empty((8, 4096))``: 2.0 us there), and a real launch
binds the same way. So a launcher's cached plan holds its constexprs as the
kernel's positional tail, built by name here once per plan.

``kernel[grid](*args, **options)`` is, in Triton 3.x, a lambda built per
call around ``kernel.run(*args, grid=grid, warmup=False, **options)``
(``KernelInterface.__getitem__``; the interpreter's kernels do the same).
Calling ``run`` directly skips building and calling that lambda: 0.7 us
instead of 1.4-2.1 per stubbed launch with ``num_warps``/``num_stages``
on the build machine. A plan therefore also holds `run_keywords`, and a call is

    kernel.run(*runtime_args, *plan.constexprs, grid=grid, **plan.launch)
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


def run_keywords(options: dict) -> dict:
    """The keywords of ``kernel.run(..., grid=grid, **keywords)`` for launch
    `options` (``num_warps``, ``num_stages``, ...): those and ``warmup=False``,
    what ``kernel[grid]`` would add."""
    return {"warmup": False, **options}
