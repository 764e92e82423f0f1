"""How a launcher calls a kernel cheaply: constexprs by position,
``kernel.run`` instead of ``kernel[grid]``, and on a compiled target's
repeated launch the CompiledKernel's own launcher without Triton's binder.

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
on the build machine. So a plan holds a `KernelLaunch`: the kernel, its
constexprs (`constexpr_args`) and `run_keywords`, and a launcher calls

    plan.launch(grid, *runtime_args)

which is ``kernel.run(...)`` on a compiled target's first launch of a
specialisation and afterwards the CompiledKernel's own launcher without
Triton's binder (the fast path, below); `LaunchSequence` does the same for
the launches of one call at once.
"""

from __future__ import annotations

from triton.runtime.jit import JITFunction

from .fast_launch import (
    MAX_ENTRIES,
    Unkeyed,
    compiled_entry,
    debug_of,
    fast_environment,
    globals_changed,
    key_function,
    kinds_key_function,
    knob_values,
)

__all__ = ["KernelLaunch", "LaunchSequence", "constexpr_args", "run_keywords"]


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


# ---------------------------------------------------------------------------
# Launches bound to a plan. A launcher's plan fixes a kernel's constexprs and
# launch options for a shape class; `KernelLaunch` holds them with the
# CompiledKernels seen, so its key covers only the runtime arguments (and the
# device and knobs), and `LaunchSequence` keys the launches of one op call
# (sampling's, fused_experts' decode) once, over the tuple of arguments they
# pick from, checking the environment once. Equal keys still imply Triton's own keys for every
# launch: each launch's constexprs and options are its object's, and its
# runtime arguments a fixed pick of the keyed tuple (keying a value no launch
# specialises on only adds misses).
# Measured stubbed below the binder (build machine, in ratios to a
# `torch.empty((8, 4096))` timed alongside): rms_norm's launch 2.2 by the
# unbound form (since removed), 1.6 by its KernelLaunch; whole calls, batch
# 8, sample 16.9 -> 7.2 (its four launches one sequence), extend_attention
# 9.9 -> 5.8, rms_norm 4.3 -> 3.5, fused_experts 10.4 -> 7.9 (its decode's
# four launches one sequence, grids per call) (docs/decode-occupancy.md).
# ---------------------------------------------------------------------------


def _first_key(owner, n_args: int, device, knobs, args):
    """The key of a bound launch's first call, after which `owner` keys with
    `kinds_key_function` for that call's argument kinds (a call with another
    count: the generic key, which refuses it with a TypeError)."""
    generic = key_function(n_args)
    if len(args) != n_args:
        return generic(device, knobs, *args)
    owner._key = kinds_key_function(args, generic)
    return owner._key(device, knobs, *args)


class KernelLaunch:
    """`kernel` with its constexprs (the tuple `constexpr_args` builds) and
    `run_keywords` fixed: ``launch(grid, *runtime_args)`` is
    ``kernel.run(*runtime_args, *constexprs, grid=grid, **keywords)``, on a
    compiled target's hit the CompiledKernel's launcher without the binder."""

    __slots__ = ("kernel", "constexprs", "keywords", "n_runtime", "_key", "_entries", "_off")

    def __init__(self, kernel, constexprs: tuple, keywords: dict):
        self.kernel, self.constexprs, self.keywords = kernel, tuple(constexprs), dict(keywords)
        self.n_runtime = len(kernel.arg_names) - len(self.constexprs)
        self._off = (type(kernel) is not JITFunction or self.keywords.get("warmup", True) is not False
                     or bool(set(kernel.arg_names) & self.keywords.keys()))  # fmt: skip
        self._key = None if self._off else self._learn_key  # replaced on its first call
        self._entries: dict = {}

    def _learn_key(self, device, knobs, *args):
        return _first_key(self, self.n_runtime, device, knobs, args)

    @property
    def fast_path_allowed(self) -> bool:
        """False for an interpreted kernel, or options the fast path never takes."""
        return not self._off

    def __call__(self, grid, *args):
        kernel = self.kernel
        env = None if self._off or type(grid) is not tuple or kernel.pre_run_hooks else fast_environment()
        if env is None:
            return kernel.run(*args, *self.constexprs, grid=grid, **self.keywords)
        drv, enter, leave = env
        device = drv.get_current_device()
        try:
            key = self._key(device, knob_values(kernel.debug), *args)
            entry = self._entries.get(key)
        except (Unkeyed, TypeError):
            return kernel.run(*args, *self.constexprs, grid=grid, **self.keywords)
        if entry is None:
            return self._miss(key, grid, args)
        if kernel.used_global_vals and globals_changed(kernel):
            return kernel.run(*args, *self.constexprs, grid=grid, **self.keywords)
        n = len(grid)
        entry[0](grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, drv.get_current_stream(device), entry[1],
                 entry[2], None, enter, leave, *args, *self.constexprs)  # fmt: skip
        return entry[3]

    def run(self, kernel, grid, *args):
        """``self(grid, *args)`` with the launcher naming, where it launches,
        the kernel it launches (`kernel`: the one this launch is bound to), so
        a reader goes from the launcher straight to the kernel."""
        if kernel is not self.kernel:
            raise TypeError(f"KernelLaunch bound to {self.kernel.fn.__name__} asked to run {kernel.fn.__name__}")
        return self(grid, *args)

    def _miss(self, key, grid, args):
        compiled = self.kernel.run(*args, *self.constexprs, grid=grid, **self.keywords)
        entry = compiled_entry(compiled)
        if entry is not None:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = entry
        return compiled


class LaunchSequence:
    """`KernelLaunch`es that run together, in order, on picks of one argument
    tuple: ``sequence(args)`` launches each step ``(launch, grid, pick)`` as
    ``launch(grid, *pick(args))`` (`pick`: an ``operator.itemgetter`` of
    several positions, or None for all of `args`), keyed once on a hit.
    ``sequence(args, grids)`` launches step i on ``grids[i]`` (a 3-tuple)
    instead of its own grid (None in its step): grids sized per call."""

    __slots__ = ("steps", "kernels", "_key", "_entries", "_off", "_n_args")

    def __init__(self, steps, n_args: int):
        self.steps = tuple(steps)
        self.kernels = tuple(launch.kernel for launch, _, _ in self.steps)
        self._off = any(launch._off or (grid is not None and type(grid) is not tuple) for launch, grid, _ in self.steps)
        self._n_args = n_args
        self._key = None if self._off else self._learn_key  # replaced on its first call
        self._entries: dict = {}

    def _learn_key(self, device, knobs, *args):
        return _first_key(self, self._n_args, device, knobs, args)

    def __call__(self, args: tuple, grids: tuple | None = None):
        env = None if self._off else fast_environment()
        for kernel in self.kernels:
            if env is None or kernel.pre_run_hooks or (kernel.used_global_vals and globals_changed(kernel)):
                env = None
                break
        entries = key = None
        if env is not None:
            drv, enter, leave = env
            device = drv.get_current_device()
            try:
                key = self._key(device, knob_values(tuple(map(debug_of, self.kernels))), *args)
                entries = self._entries.get(key)
            except (Unkeyed, TypeError):
                key = None
        if entries is None:
            self._miss(key, args, grids)
            return
        stream = drv.get_current_stream(device)
        # per step: the driver's launcher, grid, function, metadata, pick, constexprs
        if grids is None:
            for run, g0, g1, g2, function, metadata, pick, constexprs in entries:
                run(g0, g1, g2, stream, function, metadata, None, enter, leave,
                    *(args if pick is None else pick(args)), *constexprs)  # fmt: skip
            return
        if len(grids) != len(entries):  # before any launch: a failed call launches nothing
            raise TypeError(f"LaunchSequence: {len(entries)} steps need a grid each, got {grids}")
        for (run, _, _, _, function, metadata, pick, constexprs), (g0, g1, g2) in zip(entries, grids):
            run(g0, g1, g2, stream, function, metadata, None, enter, leave,
                *(args if pick is None else pick(args)), *constexprs)  # fmt: skip

    def _miss(self, key, args, grids=None):
        """Each step as its `KernelLaunch` launches it (Triton's path on its
        first key), then the CompiledKernels kept under `key` (None: nothing kept)."""
        grids = tuple(grid for _, grid, _ in self.steps) if grids is None else grids
        if len(grids) != len(self.steps) or None in grids:
            raise TypeError(f"LaunchSequence: {len(self.steps)} steps need a grid each, got {grids}")
        if key is None:
            for (launch, _, pick), grid in zip(self.steps, grids):
                launch(grid, *(args if pick is None else pick(args)))
            return
        entries = []
        for (launch, _, pick), grid in zip(self.steps, grids):
            entry = compiled_entry(launch(grid, *(args if pick is None else pick(args))))
            if entry is not None:
                n = len(grid)
                entries.append((entry[0], grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, entry[1], entry[2],
                                pick, launch.constexprs))  # fmt: skip
        if len(entries) == len(self.steps):
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = tuple(entries)
