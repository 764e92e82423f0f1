"""The fast launch path (issue 24): a repeated launch on a compiled target
skips Triton's binder, replaying the CompiledKernel Triton returned for an
equal key. Its bound forms are `ops.launch`'s `KernelLaunch` and
`LaunchSequence`; this module holds what they share."""

from __future__ import annotations

import operator
import weakref

import torch
from triton import knobs as _knobs
from triton.knobs import HookChain as _HookChain
from triton.runtime.driver import driver as _driver
from triton.runtime.jit import JITFunction as _JITFunction

from ..runtime.env import raw_env_token

# ---------------------------------------------------------------------------
# ``JITFunction.run`` costs 6-8 us a launch on the build machine before the
# driver sees anything (knob reads, current device and stream, the binder,
# ``str(options)`` in its cache key, launch metadata, hooks): more than a
# launcher's own Python. A bound launch (`ops.launch.KernelLaunch`: a kernel
# with its constexprs and launch options fixed by a plan; `LaunchSequence`:
# the launches of one op call) calls it on a miss (it compiles if needed and
# returns the CompiledKernel), keeps that CompiledKernel under a cheap key of
# its own, and on a hit calls the CompiledKernel's launcher as
# ``JITFunction.run`` does, with the current stream.
#
# The cheap key covers the runtime arguments only (the constexprs and options
# are the bound object's) and refines Triton's (equal cheap keys => equal
# Triton keys; tests/ops/test_fast_launch.py holds it to Triton's own
# binder): per runtime argument its kind and what the binder specialises on
# (a tensor's dtype and 16-byte alignment, an int's == 1 / i32 / i64 / u64
# class and 16-divisibility, None / float / bool by type), the current device
# and the knobs Triton folds into its options. It is recomputed on every
# call: alignment is never assumed.
#
# Anything else takes the plain path: an argument kind not listed, another
# argument count, launch keywords naming parameters or without
# ``warmup=False`` (the bound object is off for good), a grid that is not a
# tuple, pre-run hooks, a used global changed, a launch or stage-inspection
# hook set, an interpreted kernel, a patched or unverified
# ``JITFunction.run`` (a Triton whose launch path this was not checked
# against; also `introspect.launches`' stubs at run()), a kernel Triton hands
# back that is not a CompiledKernel (async compilation), and a driver whose
# target's capability profile has no ``fast_launch`` (Kunlun's Triton fork,
# the interpreter).
# ---------------------------------------------------------------------------

# sha256[:16] of inspect.getsource(JITFunction.run) for the Tritons whose
# launch path the bound launches mirror: 3.9.0 and 3.8.0 (SGLang 0.5.23's).
VERIFIED_RUN_SOURCES = frozenset({"3293f3bc9eab4de7", "8686893714b9aef1"})
MAX_ENTRIES = 256  # per bound launch: a plan cache churning keys costs misses, not memory
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
_MISSING = object()
debug_of = operator.attrgetter("debug")  # a kernel's `debug`, part of every key


class Unkeyed(Exception):
    """An argument the cheap key does not classify: the launch takes Triton's path."""


def _run_verified(current) -> bool:
    """Whether `current` (``JITFunction.run`` now) is a launch path
    the fast path was checked against: its source hashes to one of
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
    raise Unkeyed


def key_function(n_args: int):
    """``key(device, knobs, *args)`` over `n_args` runtime arguments: one
    flat tuple, generated as Triton builds its binder. Two parts per
    argument: a tensor's dtype and 16-byte alignment inline, an i32 other
    than 1 its class and 16-divisibility inline, anything else `_arg_key`
    and None (the parts' kinds never mix across positions: a dtype, an int
    code, a type, a tuple). Raises TypeError for another argument count."""
    names = [f"a{i}" for i in range(n_args)]
    parts = []
    for name in names:
        parts.append(f"{name}.dtype if type({name}) is _Tensor else (2 | (not {name} & 15)) if type({name}) is int "
                     f"and {name} != 1 and -0x80000000 <= {name} <= 0x7FFFFFFF else _arg_key({name})")  # fmt: skip
        parts.append(f"(not {name}.data_ptr() & 15) if type({name}) is _Tensor else None")
    source = f"def key(device, knobs, {', '.join(names)}):\n    return (device, knobs, {', '.join(parts)})\n"
    namespace = {"_Tensor": _Tensor, "_arg_key": _arg_key}
    exec(source, namespace)
    return namespace["key"]


_KINDS_TAG = object()  # first part of every `kinds_key_function` key: apart from `key_function`'s


def kinds_key_function(args, fallback):
    """``key(device, knobs, *args)`` specialised to the kinds of `args` (one
    call's runtime arguments, as a bound launch first sees them): while every
    argument has the exact type seen there, one type test each, a tensor's
    dtype and alignment, an int's one part (`_arg_key`'s code), the others
    their type; else `fallback`'s generic key. The same refinement of
    Triton's key as `key_function`'s (26 arguments: 3.0 us against 3.9 on
    the build machine); its keys start with a tag of their own, so the two
    never meet in one cache."""
    names = [f"a{i}" for i in range(len(args))]
    guards, parts = [], []
    namespace = {"_Tensor": _Tensor, "_arg_key": _arg_key, "_TAG": _KINDS_TAG, "fallback": fallback}
    for i, (name, value) in enumerate(zip(names, args)):
        kind = type(value)
        if kind is _Tensor:
            guards.append(f"type({name}) is _Tensor")
            parts += [f"{name}.dtype", f"not {name}.data_ptr() & 15"]
        elif kind is int:
            guards.append(f"type({name}) is int")
            parts.append(f"(2 | (not {name} & 15)) if {name} != 1 and -0x80000000 <= {name} <= 0x7FFFFFFF "
                         f"else _arg_key({name})")  # fmt: skip
        else:  # None, float, bool, a Parameter: exactly that type again, keyed as `_arg_key` keys it
            namespace[f"_kind{i}"] = kind
            guards.append(f"type({name}) is _kind{i}")
            parts.append(f"_arg_key({name})")
    arguments = ", ".join(names)
    source = (f"def key(device, knobs, {arguments}):\n"
              f"    if {' and '.join(guards) or 'True'}:\n"
              f"        return (_TAG, device, knobs, {', '.join(parts)})\n"
              f"    return fallback(device, knobs, {arguments})\n")  # fmt: skip
    exec(source, namespace)
    return namespace["key"]


def fast_environment():
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


def knob_values(debug) -> tuple:
    """The knobs Triton folds into a launch's options, as the key holds them,
    with the kernel's (or kernels') own `debug`."""
    return (debug, _runtime_knobs.debug, _compilation_knobs.instrumentation_mode,
            (_compilation_knobs.__dict__.get(_FPSAN), raw_env_token("TRITON_FPSAN_HOMOMORPHIC_CASTS"))
            if _HAS_FPSAN else None)  # fmt: skip


def globals_changed(kernel) -> bool:
    """As JITFunction.run: a global the kernel read must not have changed."""
    for (name, _), (val, globals_dict) in kernel.used_global_vals.items():
        if globals_dict.get(name, _MISSING) != val:
            return True
    return False


def compiled_entry(compiled):
    """What a hit hands the driver for a CompiledKernel Triton returned
    (after a launch its handles are loaded: run, the driver's launcher,
    function and packed metadata are what JITFunction.run hands over), or
    None for anything else (async compilation's futures)."""
    from triton.compiler import CompiledKernel

    if not isinstance(compiled, CompiledKernel):
        return None
    return compiled.run, compiled.function, compiled.packed_metadata, compiled
