"""Count what a launcher asks Triton for, without compiling or running it.

Two measurements of a launcher that need no device, both with every Triton
launch (``kernel.run(...)``, which ``kernel[grid](...)`` also calls)
replaced by a stub for the duration of a ``with`` block:

- `count_specializations`: each launch is bound the way Triton's own
  launcher binds it (its ``specialize_impl`` over the kernel's signature,
  ``do_not_specialize`` honoured, the constexprs and launch options), and
  the distinct keys are counted per kernel. Triton compiles once per
  distinct key, so running a generation's worth of shapes through an op
  under this counter tells how many compilations serving would trigger.
- `launcher_overhead_us`: Python microseconds per call of a launcher whose
  launches do nothing, the cost a decode step pays per layer on the host
  before the device sees any work. `stubbed_below_binder` stubs lower
  instead: Triton's own ``JITFunction.run`` runs (its binder, argument
  specialisation, cache key and lookup, grid and launch metadata), and only
  the compile and the driver's launch are stand-ins: most of a launch's host
  cost, which a stub at ``run()`` leaves out. The launchers' fast path
  (`ops.fast_launch`, which replays a cached CompiledKernel without
  the binder) runs as it does on a device.
- `kernel_specs`: the ahead-of-time compile specs (`KernelSpec`) of the
  launches a call makes, as another target would make them: the launcher's
  own code picks every constexpr, Triton's binder the argument types and
  16-divisibility (what `kunlun-triton inspect` and the lowering tests
  compile).

Works for kernels decorated under the interpreter (``TRITON_INTERPRET=1``)
and for compiled ones, on Triton 3.8 and 3.9.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections import defaultdict
from dataclasses import dataclass, field

from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction, KernelParam

from ..runtime.capabilities import AOT_PROXY, AOT_TARGETS

_KERNEL_CLASSES = (JITFunction, InterpretedFunction)


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)
    return f"{fn.__module__}:{fn.__name__}"


_binders: dict = {}


def _binder(kernel):
    """Triton's own argument binder for `kernel` (cached), built for a CUDA
    target: the same specialisation (int == 1, 16-divisibility, pointer
    alignment, dtypes) its launcher computes on a GPU."""
    fn = getattr(kernel, "fn", kernel)
    if fn in _binders:
        return _binders[fn]
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    if isinstance(kernel, JITFunction):
        params, signature = kernel.params, kernel.signature
    else:  # the interpreter keeps do_not_specialize in its kwargs
        signature = inspect.signature(fn)
        skip = set(kernel.kwargs.get("do_not_specialize") or ())
        skip_align = set(kernel.kwargs.get("do_not_specialize_on_alignment") or ())
        params = [KernelParam(i, p, i in skip or p.name in skip, i in skip_align or p.name in skip_align)
                  for i, p in enumerate(signature.parameters.values())]  # fmt: skip
    binder = create_function_from_signature(signature, params, make_backend(GPUTarget(*AOT_TARGETS[AOT_PROXY])))
    _binders[fn] = binder
    return binder


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


@dataclass
class SpecializationCounter:
    """Distinct compile keys seen per kernel (``"module:name"``), and launches."""

    keys: dict = field(default_factory=lambda: defaultdict(set))
    launches: dict = field(default_factory=lambda: defaultdict(int))

    def record(self, kernel, args, kwargs) -> None:
        name = _kernel_name(kernel)
        _, specialization, options = _binder(kernel)(*args, **kwargs)
        self.keys[name].add((_freeze(specialization), _freeze(options)))
        self.launches[name] += 1

    def compilations(self) -> dict[str, int]:
        """``{kernel: distinct specialisations}``: what Triton would compile."""
        return {name: len(keys) for name, keys in sorted(self.keys.items())}


@contextlib.contextmanager
def stubbed_launches(on_launch=None, *, with_grid: bool = False):
    """Within the block every launch of a ``@triton.jit`` kernel
    (``kernel.run(*args, grid=, warmup=, **kwargs)``, or ``kernel[grid](...)``,
    which calls it) calls ``on_launch(kernel, args, kwargs)`` (when given;
    ``with_grid``: ``on_launch(kernel, args, kwargs, grid)``) instead of
    compiling and running it."""

    def run(self, *args, grid, warmup, **kwargs):
        if on_launch is not None:
            on_launch(self, args, kwargs, *((grid,) if with_grid else ()))
        return None

    saved = [(cls, cls.__dict__["run"]) for cls in _KERNEL_CLASSES]
    try:
        for cls in _KERNEL_CLASSES:
            cls.run = run
        yield
    finally:
        for cls, original in saved:
            cls.run = original


@contextlib.contextmanager
def count_specializations():
    """``with count_specializations() as counter: ...`` then
    ``counter.compilations()``; nothing is compiled or launched."""
    counter = SpecializationCounter()
    with stubbed_launches(counter.record):
        yield counter


def record_launches(call, *, with_grid: bool = False) -> list[tuple]:
    """``call()`` with launches stubbed; returns its ``(kernel, args, kwargs)``
    launches (``with_grid``: ``(kernel, args, kwargs, grid)``)."""
    launches = []
    with stubbed_launches(lambda *launch: launches.append(launch), with_grid=with_grid):
        call()
    return launches


def spec_of_launch(kernel, args, kwargs):
    """The `KernelSpec` Triton would compile for one launch."""
    from .aot import KernelSpec

    bound, specialization, options = _binder(kernel)(*args, **kwargs)
    signature, constexprs, attrs = {}, {}, {}
    for name, (kind, value) in zip(bound, specialization):
        signature[name] = kind
        if kind == "constexpr":
            constexprs[name] = value
        elif value == "D":
            attrs[name] = [["tt.divisibility", 16]]
    return KernelSpec(_kernel_name(kernel), signature, constexprs, dict(options), attrs)


def kernel_specs(call, target) -> list:
    """The KernelSpecs of the launches ``call()`` makes when `target`
    (a `runtime.Target`, e.g. ``Target("cuda", "sm_90", "meta", ...)``) is
    the active one: its configs and capabilities pick the constexprs. Build
    the call's tensors on ``target.device_type`` ("meta": shapes only, no
    memory)."""
    from ..runtime import targeting

    with targeting(target):
        launches = record_launches(call)
    return [spec_of_launch(*launch) for launch in launches]


def with_loop_items(specs, items: dict) -> list:
    """`specs` with ``loop_items`` set from a constexpr: ``{kernel name:
    constexpr name}`` (e.g. ``{"extend_kernel": "BLOCK_N"}``)."""
    import dataclasses

    return [dataclasses.replace(s, loop_items=s.constexprs[items[s.name]]) if s.name in items else s for s in specs]


def meta_kernel_specs(call) -> list:
    """`kernel_specs` for the active target, with ``call`` building its
    tensors on the ``"meta"`` device (an op spec's ``kernels``: shapes of any
    size cost no memory). ``with runtime.targeting(T):`` around it plans
    another target's launches."""
    from ..runtime import Target, current_target

    target = current_target()
    return kernel_specs(call, Target(target.name, target.arch, "meta", target.reason))


class _StubDriver:
    """What ``JITFunction.run`` asks the driver, answered without a device:
    a device key of its own (so no real device's kernel cache is touched)
    and the sm_90 target Triton's binder specialises for."""

    DEVICE = "kunlun-triton-stub"

    def get_current_device(self):
        return self.DEVICE

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(*AOT_TARGETS[AOT_PROXY])


def _compiled_kernel_class():
    from triton.compiler import CompiledKernel

    return CompiledKernel


class _StubKernel(_compiled_kernel_class()):
    """A compiled kernel's launch interface, doing nothing (the driver's
    launch). A CompiledKernel (nothing loaded, nothing to unload), so the
    launchers' fast path (`ops.fast_launch`) keeps and replays it as it
    does a real one; `on_launch(kernel, args)` (when given) sees each driver
    launch's arguments, ``(grid_0, grid_1, grid_2, stream, function,
    packed_metadata, launch_metadata, enter_hook, exit_hook, *args)``."""

    function = packed_metadata = module = None
    on_launch = None

    def __init__(self, key=None):
        self.key = key

    def launch_metadata(self, grid, stream, *args):
        return None

    def run(self, *args, **kwargs):
        if _StubKernel.on_launch is not None:
            _StubKernel.on_launch(self, args)
        return None


def _stub_compile(self, key, *args, **kwargs):
    """Stands in for ``JITFunction._do_compile``: caches a do-nothing kernel
    under the key, so later launches with the key hit Triton's cache as a
    served kernel does."""
    kernel = _StubKernel(key)
    self.device_caches[_StubDriver.DEVICE][0][key] = kernel
    return kernel


@contextlib.contextmanager
def stubbed_below_binder(on_launch=None):
    """Within the block compiled-mode launches (``JITFunction.run``, and the
    launchers' fast path that replays its CompiledKernels) run Triton's own
    launch path down to the driver's launch call, which does nothing but
    call ``on_launch(kernel, driver_args)`` when given; compiles are
    stand-ins. Interpreted kernels have no binder: refused (run without
    ``TRITON_INTERPRET``)."""
    from triton.runtime.driver import driver

    if JITFunction.__dict__.get("run") is None:
        raise RuntimeError("stubbed_below_binder: this Triton's JITFunction has no run() to measure")
    saved_driver, saved_compile = driver._active, JITFunction.__dict__["_do_compile"]
    interpreted_run = InterpretedFunction.__dict__["run"]

    def refuse(self, *args, **kwargs):
        raise RuntimeError("stubbed_below_binder: an interpreted kernel (TRITON_INTERPRET=1) has no binder to count")

    try:
        driver.set_active(_StubDriver())
        JITFunction._do_compile = _stub_compile
        InterpretedFunction.run = refuse
        _StubKernel.on_launch = on_launch
        yield
    finally:
        _StubKernel.on_launch = None
        driver._active = saved_driver
        JITFunction._do_compile = saved_compile
        InterpretedFunction.run = interpreted_run


def launcher_overhead_us(call, repeat: int = 2000, warmup: int = 200, rounds: int = 7) -> float:
    """Microseconds per ``call()`` with every Triton launch stubbed out (the
    launcher's own Python only): the best of `rounds` means over `repeat`
    calls, in this thread's CPU time (``time.thread_time``), so other
    processes on a shared machine add nothing."""
    with stubbed_launches():
        for _ in range(warmup):
            call()
        means = []
        for _ in range(rounds):
            start = time.thread_time()
            for _ in range(repeat):
                call()
            means.append((time.thread_time() - start) / repeat * 1e6)
    return min(means)


def compare_launchers_us(calls: dict, repeat: int = 2000, warmup: int = 200, rounds: int = 7,
                         below_binder: bool = False) -> dict:  # fmt: skip
    """`launcher_overhead_us` of several calls (``{name: call}``), their
    rounds interleaved so a shared machine's load drifts over all alike.
    `below_binder`: launches stubbed under Triton's binder
    (`stubbed_below_binder`) instead of at ``run()``."""
    best = {name: float("inf") for name in calls}
    with stubbed_below_binder() if below_binder else stubbed_launches():
        for call in calls.values():
            for _ in range(warmup):
                call()
        for _ in range(rounds):
            for name, call in calls.items():
                start = time.thread_time()
                for _ in range(repeat):
                    call()
                best[name] = min(best[name], (time.thread_time() - start) / repeat * 1e6)
    return best
