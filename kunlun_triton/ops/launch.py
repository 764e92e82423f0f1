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

    run_kernel(kernel, *runtime_args, *plan.constexprs, grid=grid, **plan.launch)

which is ``kernel.run(...)`` on a compiled target's first launch of a
specialisation, and afterwards the CompiledKernel's own launcher without
Triton's binder (`run_kernel`, below).
"""

from __future__ import annotations

import operator
import weakref

import torch
from triton import knobs as _knobs
from triton.knobs import HookChain as _HookChain
from triton.runtime.driver import driver as _driver
from triton.runtime.jit import JITFunction as _JITFunction

from ..runtime.env import raw_env_token


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
# The fast launch path (issue 24): Triton's binder skipped on a cache hit.
#
# ``JITFunction.run`` costs 6-8 us a launch on the build machine before the
# driver sees anything (knob reads, current device and stream, the binder,
# ``str(options)`` in its cache key, launch metadata, hooks): more than a
# launcher's own Python. `run_kernel` calls it as a launcher would on a miss (it
# compiles if needed and returns the CompiledKernel), keeps that
# CompiledKernel under a cheap key of its own, and on a hit calls the
# CompiledKernel's launcher as ``JITFunction.run`` does, with the current
# stream.
#
# The cheap key refines Triton's (equal cheap keys => equal Triton keys;
# tests/ops/test_fast_launch.py holds it to Triton's own binder): per
# runtime argument its kind and what the binder specialises on (a tensor's
# dtype and 16-byte alignment, an int's == 1 / i32 / i64 / u64 class and
# 16-divisibility), a constexpr's type and value, the launch keywords' names,
# types and values, the current device and the knobs Triton folds into its
# options. It is recomputed on every call: alignment is never assumed.
#
# Anything else takes the plain path: an argument kind not listed, keywords
# naming parameters, fewer positional arguments than parameters (defaults), a
# grid that is not a tuple, warmup, pre-run hooks, a launch or
# stage-inspection hook set, an interpreted kernel, a patched or unverified
# ``JITFunction.run`` (a Triton whose launch path this was not checked
# against; also `introspect.launches`' stubs at run()), a kernel Triton hands
# back that is not a CompiledKernel (async compilation), and a driver whose
# target's capability profile has no ``fast_launch`` (Kunlun's Triton fork,
# the interpreter).
# ---------------------------------------------------------------------------

# sha256[:16] of inspect.getsource(JITFunction.run) for the Tritons whose
# launch path `run_kernel` mirrors: 3.9.0 and 3.8.0 (SGLang 0.5.23's).
VERIFIED_RUN_SOURCES = frozenset({"3293f3bc9eab4de7", "8686893714b9aef1"})
_MAX_ENTRIES = 256  # per kernel: a plan cache churning keys costs misses, not memory
_STATE = "_kunlun_triton_fast_launch"  # the kernel's attribute holding its _FastKernel
_Tensor, _Parameter = torch.Tensor, torch.nn.Parameter
_runtime_knobs, _compilation_knobs = _knobs.runtime, _knobs.compilation
# Triton 3.9 folds this knob into every launch's options (3.8 has none). Its
# getter decodes the environment on every read (0.4 us); the key holds the
# raw value instead (equal raw values decode alike) and any value set in code.
_FPSAN = "fpsan_homomorphic_casts"
_HAS_FPSAN = _FPSAN in type(_compilation_knobs).__dict__
_verified_run = None  # the last JITFunction.run whose source matched
_rejected_run = None  # the last JITFunction.run whose source did not
_RUN_CHECKS = weakref.WeakKeyDictionary()  # JITFunction.run functions seen -> verified
_fast_driver = None  # the last driver seen whose target takes the fast path
_DRIVERS: dict = {}  # id(driver) -> (driver, whether its target takes the fast path)


class _Plain(Exception):
    """An argument the cheap key does not classify: the launch takes Triton's path."""


def _run_verified(current) -> bool:
    """Whether `current` (``JITFunction.run`` now) is a launch path
    `run_kernel` was checked against: its source hashes to one of
    `VERIFIED_RUN_SOURCES`. Decided once per function object; a patched
    ``run`` (another Triton, a profiler, `introspect.launches`' stubs at
    run()) is not, and the launch takes it, until the original is back."""
    global _verified_run, _rejected_run
    if current is _rejected_run:
        return False
    known = _RUN_CHECKS.get(current)
    if known is None:
        import hashlib
        import inspect

        try:
            digest = hashlib.sha256(inspect.getsource(current).encode()).hexdigest()[:16]
        except (OSError, TypeError):
            digest = None
        known = _RUN_CHECKS[current] = digest in VERIFIED_RUN_SOURCES
    if known:
        _verified_run = current
    else:
        _rejected_run = current  # held while it is patched in: one identity test per launch
    return known


def _driver_allows(drv) -> bool:
    """Whether launches through driver `drv` take the fast path: its target's
    capability profile has ``fast_launch`` (cuda, hip)."""
    global _fast_driver
    known = _DRIVERS.get(id(drv))
    if known is None or known[0] is not drv:
        from ..runtime.capabilities import fast_launch_backend

        try:
            allowed = fast_launch_backend(drv.get_current_target().backend)
        except Exception:  # a driver with no target to name: nothing verified
            allowed = False
        if len(_DRIVERS) >= 64:  # drivers swapped in and out (introspect's stubs): forget the old ones
            _DRIVERS.clear()
        known = _DRIVERS[id(drv)] = (drv, allowed)
    if known[1]:
        _fast_driver = drv
    return known[1]


def _arg_key(value):
    """The cheap key of a runtime argument other than a plain tensor or an
    i32 other than 1: what Triton's binder specialises it on, refined."""
    kind = type(value)
    if kind is int:  # == 1, then i32 / i64 / u64 as the binder ranges them, each with 16-divisibility
        if value == 1:
            return 1
        if -0x80000000 <= value <= 0x7FFFFFFF:
            return 2 | (not value & 15)
        if -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
            return 4 | (not value & 15)
        if 0 <= value <= 0xFFFFFFFFFFFFFFFF:
            return 6 | (not value & 15)
    elif value is None or kind is float or kind is bool:  # constexpr None, fp32, u1: no value specialised
        return kind
    elif kind is _Parameter:
        return value.dtype, not value.data_ptr() & 15
    raise _Plain


_TRUE, _FALSE = object(), object()  # constexpr True / False in a key: apart from 1 / 0 and from any value


def _constexpr_key(value):
    """A constexpr's key part that is not a plain int or bool: its type and
    value (-0.0 and 0.0 apart, as Triton's string key keeps them)."""
    return type(value), value.hex() if type(value) is float else value


def _key_function(kernel, runtime_only: int | None = None):
    """``key(device, knobs, keywords, *args)`` for `kernel`: one flat tuple,
    generated from its signature as Triton builds its binder. Two parts per
    runtime argument: a tensor's dtype and 16-byte alignment inline, an i32
    other than 1 its class and 16-divisibility inline, anything else
    `_arg_key` and None (the parts' kinds never mix across positions: a dtype,
    an int code, a type, a tuple). A constexpr: an int as is, else its type
    and value (True / False as sentinels). Raises TypeError for another
    argument count. `runtime_only` (`KernelLaunch`): ``key(device, knobs,
    *args)`` over that many runtime arguments, the rest of the key fixed."""
    params = [p.is_constexpr for p in kernel.params] if runtime_only is None else [False] * runtime_only
    names = [f"a{i}" for i in range(len(params))]
    parts = []
    for name, is_constexpr in zip(names, params):
        if is_constexpr:
            parts.append(f"{name} if type({name}) is int else _TRUE if {name} is True else _FALSE if {name} is False "
                         f"else _constexpr_key({name})")  # 1 and True apart  # fmt: skip
            continue
        parts.append(f"{name}.dtype if type({name}) is _Tensor else (2 | (not {name} & 15)) if type({name}) is int "
                     f"and {name} != 1 and -0x80000000 <= {name} <= 0x7FFFFFFF else _arg_key({name})")  # fmt: skip
        parts.append(f"(not {name}.data_ptr() & 15) if type({name}) is _Tensor else None")
    keywords = "keywords, " if runtime_only is None else ""
    source = f"def key(device, knobs, {keywords}{', '.join(names)}):\n    return (device, knobs, {keywords}" \
             f"{', '.join(parts)})\n"  # fmt: skip
    namespace = {"_Tensor": _Tensor, "_arg_key": _arg_key, "_constexpr_key": _constexpr_key, "_TRUE": _TRUE,
                 "_FALSE": _FALSE}  # fmt: skip
    exec(source, namespace)
    return namespace["key"]


class _FastKernel:
    """One kernel's fast-path state: whether it may take it at all, its key
    function, its parameter names, and the CompiledKernels seen, by key."""

    __slots__ = ("off", "key", "param_names", "entries")

    def __init__(self, kernel):
        self.off = type(kernel) is not _JITFunction  # an interpreted kernel, or another launcher's
        self.key = None if self.off else _key_function(kernel)
        self.param_names = frozenset(() if self.off else kernel.arg_names)
        self.entries: dict = {}


def _state(kernel) -> _FastKernel:
    state = _FastKernel(kernel)
    setattr(kernel, _STATE, state)
    return state


def _miss(state, key, kernel, args, grid, keywords):
    """Triton's own launch (it compiles if needed), then its CompiledKernel
    kept under `key` when the fast path may replay it."""
    from triton.compiler import CompiledKernel

    compiled = kernel.run(*args, grid=grid, **keywords)
    if isinstance(compiled, CompiledKernel) and not (state.param_names & keywords.keys()):
        if len(state.entries) >= _MAX_ENTRIES:
            state.entries.clear()
        # after a launch its handles are loaded: run (the driver's launcher),
        # function and packed metadata are what JITFunction.run hands over
        state.entries[key] = (compiled.run, compiled.function, compiled.packed_metadata, compiled)
    return compiled


def _environment():
    """``(driver, enter hook, exit hook)`` when launches may take the fast
    path now (a verified ``JITFunction.run``, a driver whose target has
    ``fast_launch``, no launch or stage-inspection hook), else None."""
    drv = _driver._active
    enter, leave = _runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook
    current = _JITFunction.run
    if ((current is not _verified_run and not _run_verified(current)) or (drv is not _fast_driver and not _driver_allows(drv))
            or type(enter) is not _HookChain or enter.calls or type(leave) is not _HookChain or leave.calls
            or _runtime_knobs.add_stages_inspection_hook is not None):  # fmt: skip
        return None
    return drv, enter, leave


def _knob_values(debug) -> tuple:
    """The knobs Triton folds into a launch's options, as the key holds them,
    with the kernel's (or kernels') own `debug`."""
    return (debug, _runtime_knobs.debug, _compilation_knobs.instrumentation_mode,
            (_compilation_knobs.__dict__.get(_FPSAN), raw_env_token("TRITON_FPSAN_HOMOMORPHIC_CASTS"))
            if _HAS_FPSAN else None)  # fmt: skip


def _globals_changed(kernel) -> bool:
    """As JITFunction.run: a global the kernel read must not have changed."""
    for (name, _), (val, globals_dict) in kernel.used_global_vals.items():
        if globals_dict.get(name, _MISSING) != val:
            return True
    return False


def run_kernel(kernel, *args, grid, **keywords):
    """``kernel.run(*args, grid=grid, **keywords)``, without Triton's binder
    when this launch's cheap key has been seen (see above)."""
    state = kernel.__dict__.get(_STATE) or _state(kernel)
    env = None if state.off or type(grid) is not tuple or keywords.get("warmup", True) is not False \
        or kernel.pre_run_hooks else _environment()  # fmt: skip
    if env is None:
        return kernel.run(*args, grid=grid, **keywords)
    drv, enter, leave = env
    device = drv.get_current_device()
    try:
        key = state.key(device, _knob_values(kernel.debug), (*keywords.items(), *map(type, keywords.values())), *args)
        entry = state.entries.get(key)
    except (_Plain, TypeError):  # an argument not classified, another count, an unhashable value
        return kernel.run(*args, grid=grid, **keywords)
    if entry is None:
        return _miss(state, key, kernel, args, grid, keywords)
    if kernel.used_global_vals and _globals_changed(kernel):
        return kernel.run(*args, grid=grid, **keywords)
    n = len(grid)
    # the launch metadata is read only by launch hooks, and none is set
    entry[0](grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, drv.get_current_stream(device), entry[1],
             entry[2], None, enter, leave, *args)  # fmt: skip
    return entry[3]


# ---------------------------------------------------------------------------
# Launches bound to a plan. A launcher's plan fixes a kernel's constexprs and
# launch options for a shape class; `KernelLaunch` holds them with the
# CompiledKernels seen, so its key covers only the runtime arguments (and the
# device and knobs), and `LaunchSequence` keys the launches of one op call
# (sampling's four, fused_experts' four) once, over the tuple of arguments
# they pick from, checking the environment once. Equal keys still imply
# Triton's own keys for every launch: each launch's constexprs and options
# are its object's, and its runtime arguments a fixed pick of the keyed tuple
# (keying a value no launch specialises on only adds misses).
# Stubbed below the binder, build machine (batch 8, us per call at a
# `torch.empty((8, 4096))` of 1.6 us): rms_norm 3.7 -> ... a launch; sample
# ... for its four.
# ---------------------------------------------------------------------------


class KernelLaunch:
    """`kernel` with its constexprs (the tuple `constexpr_args` builds) and
    `run_keywords` fixed: ``launch(grid, *runtime_args)`` is
    ``kernel.run(*runtime_args, *constexprs, grid=grid, **keywords)``, on a
    compiled target's hit the CompiledKernel's launcher without the binder."""

    __slots__ = ("kernel", "constexprs", "keywords", "n_runtime", "_key", "_entries", "_off")

    def __init__(self, kernel, constexprs: tuple, keywords: dict):
        self.kernel, self.constexprs, self.keywords = kernel, tuple(constexprs), dict(keywords)
        self.n_runtime = len(kernel.arg_names) - len(self.constexprs)
        self._off = (type(kernel) is not _JITFunction or self.keywords.get("warmup", True) is not False
                     or bool(set(kernel.arg_names) & self.keywords.keys()))  # fmt: skip
        self._key = None if self._off else _key_function(None, self.n_runtime)
        self._entries: dict = {}

    @property
    def fast_path_allowed(self) -> bool:
        """False for an interpreted kernel, or options the fast path never takes."""
        return not self._off

    def __call__(self, grid, *args):
        kernel = self.kernel
        env = None if self._off or type(grid) is not tuple or kernel.pre_run_hooks else _environment()
        if env is None:
            return kernel.run(*args, *self.constexprs, grid=grid, **self.keywords)
        drv, enter, leave = env
        device = drv.get_current_device()
        try:
            key = self._key(device, _knob_values(kernel.debug), *args)
            entry = self._entries.get(key)
        except (_Plain, TypeError):
            return kernel.run(*args, *self.constexprs, grid=grid, **self.keywords)
        if entry is None:
            return self._miss(key, grid, args)
        if kernel.used_global_vals and _globals_changed(kernel):
            return kernel.run(*args, *self.constexprs, grid=grid, **self.keywords)
        n = len(grid)
        entry[0](grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, drv.get_current_stream(device), entry[1],
                 entry[2], None, enter, leave, *args, *self.constexprs)  # fmt: skip
        return entry[3]

    def _miss(self, key, grid, args):
        compiled = self.kernel.run(*args, *self.constexprs, grid=grid, **self.keywords)
        entry = _entry(compiled)
        if entry is not None:
            if len(self._entries) >= _MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = entry
        return compiled


def _entry(compiled):
    """What a hit hands the driver for a CompiledKernel Triton returned, or
    None for anything else (async compilation's futures)."""
    from triton.compiler import CompiledKernel

    if not isinstance(compiled, CompiledKernel):
        return None
    return compiled.run, compiled.function, compiled.packed_metadata, compiled


class LaunchSequence:
    """`KernelLaunch`es that run together, in order, on picks of one argument
    tuple: ``sequence(args)`` launches each step ``(launch, grid, pick)`` as
    ``launch(grid, *pick(args))`` (`pick`: an ``operator.itemgetter`` of
    several positions, or None for all of `args`), keyed once on a hit."""

    __slots__ = ("steps", "kernels", "_key", "_entries", "_off")

    def __init__(self, steps, n_args: int):
        self.steps = tuple(steps)
        self.kernels = tuple(launch.kernel for launch, _, _ in self.steps)
        self._off = any(launch._off or type(grid) is not tuple for launch, grid, _ in self.steps)
        self._key = None if self._off else _key_function(None, n_args)
        self._entries: dict = {}

    def __call__(self, args: tuple):
        env = None if self._off else _environment()
        for kernel in self.kernels:
            if env is None or kernel.pre_run_hooks or (kernel.used_global_vals and _globals_changed(kernel)):
                env = None
                break
        entries = key = None
        if env is not None:
            drv, enter, leave = env
            device = drv.get_current_device()
            try:
                key = self._key(device, _knob_values(tuple(map(_DEBUG, self.kernels))), *args)
                entries = self._entries.get(key)
            except (_Plain, TypeError):
                key = None
        if entries is None:
            self._miss(key, args)
            return
        stream = drv.get_current_stream(device)
        # per step: the driver's launcher, grid, function, metadata, pick, constexprs
        for run, g0, g1, g2, function, metadata, pick, constexprs in entries:
            run(g0, g1, g2, stream, function, metadata, None, enter, leave,
                *(args if pick is None else pick(args)), *constexprs)  # fmt: skip

    def _miss(self, key, args):
        """Each step as its `KernelLaunch` launches it (Triton's path on its
        first key), then the CompiledKernels kept under `key`."""
        entries = []
        for launch, grid, pick in self.steps:
            entry = _entry(launch(grid, *(args if pick is None else pick(args))))
            if entry is not None:
                n = len(grid)
                entries.append((entry[0], grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, entry[1], entry[2],
                                pick, launch.constexprs))  # fmt: skip
        if key is not None and len(entries) == len(self.steps):
            if len(self._entries) >= _MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = tuple(entries)


_MISSING = object()
_DEBUG = operator.attrgetter("debug")
