"""The compiled-mode side of tests/ops/test_fast_launch.py: run as a child
without TRITON_INTERPRET (Triton's binder exists only for compiled kernels),
the driver stubbed below the binder (`introspect.launches.stubbed_below_binder`:
Triton's own JITFunction.run down to the driver's launch, compiles stood in
by one stub CompiledKernel per Triton cache key). Prints one JSON line.

The oracle is Triton itself: for every launch, the CompiledKernel the fast
path (`ops.launch`'s KernelLaunch and LaunchSequence) hands the driver must
be the one Triton's own ``kernel.run`` hands it for the same arguments
(found under Triton's cache key), with the same grid, stream, function,
metadata, hooks and arguments; and where the fast path must not be taken,
Triton's binder runs (counted by wrapping it).
"""

from __future__ import annotations

import json
import operator
import os
import sys
import traceback

import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kunlun_triton.introspect.launches import _StubDriver, _StubKernel, record_launches, stubbed_below_binder
from kunlun_triton.ops.launch import KernelLaunch, LaunchSequence, run_keywords
from kunlun_triton.runtime import Target, targeting


@triton.jit
def probe_kernel(t0, t1, i0, i1, i2, f0, b0, n0, C0: tl.constexpr, C1: tl.constexpr):
    tl.program_id(0)


@triton.jit(do_not_specialize=["i1"], do_not_specialize_on_alignment=["t1"])
def probe_flags_kernel(t0, t1, i0, i1, i2, f0, b0, n0, C0: tl.constexpr, C1: tl.constexpr):
    tl.program_id(0)


@triton.jit
def probe_patched_kernel(t0, i0, C0: tl.constexpr):
    tl.program_id(0)


GLOBAL_WIDTH = tl.constexpr(4)  # read by probe_globals_kernel: Triton refuses a launch once it changed


@triton.jit
def probe_globals_kernel(t0, i0, C0: tl.constexpr):
    tl.program_id(0) + GLOBAL_WIDTH


@triton.jit
def probe_async_kernel(t0, i0, C0: tl.constexpr):
    tl.program_id(0)


BOUNDARY_INTS = [0, 1, -1, 2, 15, 16, 17, -16, -17, 32, 2**31 - 1, 2**31, 2**31 + 16, -(2**31), -(2**31) - 1,
                 -(2**31) - 16, 2**32, 2**63 - 1, 2**63, 2**63 + 16, 2**64 - 1, 2**64 - 16, -(2**63), -(2**63) + 16]
BUFFER = torch.zeros(64, dtype=torch.float32)
BUFFERS = {dtype: torch.zeros(128, dtype=dtype) for dtype in (torch.float32, torch.bfloat16, torch.int64)}


class Recorder:
    """Each driver launch: the stub CompiledKernel launched and its arguments."""

    def __init__(self):
        self.launches = []

    def __call__(self, kernel, args):
        self.launches.append((kernel, args))


def count_binders(kernels, counter):
    """Wrap each kernel's Triton binder (its stub device's) to count Triton-path launches."""
    for kernel in kernels:
        caches = kernel.device_caches[_StubDriver.DEVICE]
        binder = getattr(caches[4], "original", caches[4])

        def counting(*args, _binder=binder, _name=kernel.fn.__name__, **kwargs):
            counter[_name] = counter.get(_name, 0) + 1
            return _binder(*args, **kwargs)

        counting.original = binder
        kernel.device_caches[_StubDriver.DEVICE] = (*caches[:4], counting)


# --- (a) + (c): the fast path launches Triton's own CompiledKernel, whatever the arguments ---------------------

def runtime_value():
    tensor = st.tuples(st.sampled_from(sorted(BUFFERS, key=str)), st.integers(0, 20)).map(
        lambda p: BUFFERS[p[0]][p[1]:])  # element offsets: 16-byte aligned or not, by dtype
    ints = st.one_of(st.sampled_from(BOUNDARY_INTS), st.integers(-(2**63), 2**64 - 1), st.integers(-40, 40))
    return st.one_of(tensor, ints, st.sampled_from([None, True, False, 0.0, -0.0, 1.0, 2.5]))


def constexpr_value():
    return st.one_of(st.sampled_from([1, True, 1.0, 0, False, 16, 0.0, -0.0, None, 4096]), st.integers(-3, 3))


def launch_tuple():
    return st.tuples(st.lists(runtime_value(), min_size=8, max_size=8), constexpr_value(), constexpr_value(),
                     st.sampled_from([{"num_warps": 4}, {"num_warps": 8}, {"num_warps": 4, "num_stages": 2}]))


def _same_launch(fast, plain, what):
    (fast_kernel, fast_args), = fast
    (plain_kernel, plain_args), = plain
    assert fast_kernel is plain_kernel, (what, fast_kernel.key, plain_kernel.key)
    assert len(fast_args) == len(plain_args) and all(a is b or a == b for a, b in zip(fast_args, plain_args)), \
        (what, fast_args, plain_args)


def _constexpr_id(value):
    return type(value), repr(value)  # 1 / True / 1.0 and 0.0 / -0.0 apart


def _binder_calls(counter) -> int:
    return sum(counter.values())


def _flip_alignment(value):
    """A tensor at the next element offset of its buffer that flips its
    16-byte alignment; anything else as is."""
    if not isinstance(value, torch.Tensor):
        return value
    offset, per = value.storage_offset(), 16 // value.element_size()
    return BUFFERS[value.dtype][offset + 1 if offset % per == 0 else offset - offset % per:]


def _with_twins(sequence):
    """Each launch, then (when it has tensors) its twin with every tensor's
    alignment flipped: a key that drops an alignment meets Triton's key."""
    for runtime, c0, c1, options in sequence:
        yield runtime, c0, c1, options
        twin = [_flip_alignment(value) for value in runtime]
        if any(a is not b for a, b in zip(twin, runtime)):
            yield twin, c0, c1, options


def check_against_triton(sequence, kernel, bound: dict, tally: dict):
    """Every launch through a `KernelLaunch` (one per constexprs and options,
    kept in `bound` across sequences) and through a two-step `LaunchSequence`
    (`kernel` on the arguments, then probe_kernel on a permutation of them)
    hands the driver the CompiledKernels and the arguments Triton's own run()
    does for the same launches (each followed by its alignment twin); then
    the same launches again, last first, so that every one meets keys seen
    before (hits, counted in `tally` by Triton's binder not running)."""
    swap = operator.itemgetter(1, 0, 3, 2, 4, 5, 6, 7)
    counter = tally["binder_counter"]
    seen = []
    for runtime, c0, c1, options in _with_twins(sequence):
        args = (*runtime, c0, c1)
        plain, swapped = Recorder(), Recorder()
        with stubbed_below_binder(plain):
            kernel.run(*args, grid=(3, 2), warmup=False, **options)
        with stubbed_below_binder(swapped):
            probe_kernel.run(*swap(runtime), c0, c1, grid=(2,), warmup=False, **options)
        for counted in (kernel,) if kernel is probe_kernel else (kernel, probe_kernel):  # binders exist once launched
            if not hasattr(counted.device_caches[_StubDriver.DEVICE][4], "original"):
                count_binders([counted], counter)
        key = (_constexpr_id(c0), _constexpr_id(c1), tuple(sorted(options.items())))
        if key not in bound:
            bind = lambda k: KernelLaunch(k, (c0, c1), run_keywords(options))  # noqa: E731
            bound[key] = (bind(kernel), LaunchSequence([(bind(kernel), (3, 2), None), (bind(probe_kernel), (2,), swap)],
                                                       len(runtime)))  # fmt: skip
        seen.append((*bound[key], tuple(runtime), plain, swapped, (args, options)))
    for single, steps, runtime, plain, swapped, what in (*seen, *reversed(seen)):
        fast, before = Recorder(), _binder_calls(counter)
        with stubbed_below_binder(fast):
            single((3, 2), *runtime)
        _same_launch(fast.launches, plain.launches, ("KernelLaunch", *what))
        tally["single_hits"] += _binder_calls(counter) == before
        fast, before = Recorder(), _binder_calls(counter)
        with stubbed_below_binder(fast):
            steps(runtime)
        _same_launch(fast.launches[:1], plain.launches, ("LaunchSequence step 1", *what))
        _same_launch(fast.launches[1:], swapped.launches, ("LaunchSequence step 2", *what))
        tally["sequence_hits"] += _binder_calls(counter) == before
        tally["launches"] += 1


def oracle(examples: int) -> dict:
    out = {}
    for kernel in (probe_kernel, probe_flags_kernel):
        name = kernel.fn.__name__

        @settings(max_examples=examples, deadline=None, database=None, derandomize=bool(os.environ.get("CI")),
                  suppress_health_check=list(HealthCheck))  # derandomized under CI, as the suite's "ci" profile
        @given(st.lists(launch_tuple(), min_size=1, max_size=12))
        def holds(sequence):
            check_against_triton(sequence, kernel, bound, tally)

        bound, tally = {}, {"binder_counter": {}, "single_hits": 0, "sequence_hits": 0, "launches": 0}
        try:
            holds()
            del tally["binder_counter"]
            out[name] = {"ok": True, **tally,
                         # Triton cache keys reached, and the most keys one bound object kept
                         "triton_keys": len(kernel.device_caches[_StubDriver.DEVICE][0]),
                         "single_entries": max(len(single._entries) for single, _ in bound.values()),
                         "sequence_entries": max(len(steps._entries) for _, steps in bound.values())}  # fmt: skip
        except Exception:
            out[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    return out


def changes_after_a_hit() -> dict:
    """Through a KernelLaunch and a one-step LaunchSequence: a miss (Triton's
    path), a hit (no binder, the same CompiledKernel), then a changed
    alignment / int class / dtype / None: Triton's path (its binder runs) and
    another CompiledKernel; back to the first arguments: the first
    CompiledKernel, from the fast path (no binder). The same again on fresh
    ones whose first call saw other argument kinds (the last argument None,
    not an int), so that every later call goes through the generic
    `key_function` key, not the one specialised to its kinds. Then another
    constexpr or option, which a bound launch fixes: another KernelLaunch,
    through Triton to another CompiledKernel, while the first still hits."""
    counter, rec = {}, Recorder()
    aligned = BUFFERS[torch.float32]
    first = (aligned, aligned, 16, 16, 16, 1.0, True, 16)
    variants = {name: (*first[:i], value, *first[i + 1:]) for name, (i, value) in {
        "alignment": (0, aligned[1:]), "divisibility": (2, 17), "one": (2, 1), "i64": (2, 2**31),
        "dtype": (0, BUFFERS[torch.bfloat16]), "none": (4, None)}.items()}  # fmt: skip
    result = {}

    def change(first_kernel, launch_changed, launch_first):
        before = _binder_calls(counter)
        launch_changed()
        changed = rec.launches[-1][0]
        launch_first()
        return {"binder": _binder_calls(counter) - before, "new": changed is not first_kernel,
                "triton_key_differs": changed.key != first_kernel.key,
                "back_to_first": rec.launches[-1][0] is first_kernel}

    def bind():
        return KernelLaunch(probe_kernel, (8, 8), run_keywords({}))

    with stubbed_below_binder(rec):
        bound = bind()
        for kind, launch, learn in (("bound", bound, False), ("generic bound", bind(), True),
                                    ("sequence", LaunchSequence([(bind(), (1,), None)], 8), False),
                                    ("generic sequence", LaunchSequence([(bind(), (1,), None)], 8), True)):
            call = (lambda a, launch=launch: launch(a)) if "sequence" in kind else \
                (lambda a, launch=launch: launch((1,), *a))  # fmt: skip
            if learn:
                call((*first[:-1], None))  # its key now specialised to these kinds: the rest take the generic key
            call(first)  # a miss: Triton's own run() picks the CompiledKernel, which is kept
            first_kernel = rec.launches[-1][0]
            count_binders([probe_kernel], counter)
            before = _binder_calls(counter)
            call(first)
            result[f"{kind} hit"] = {"binder": _binder_calls(counter) - before,
                                     "same": rec.launches[-1][0] is first_kernel}
            for name, args in variants.items():
                result[f"{kind} {name}"] = change(first_kernel, lambda: call(args), lambda: call(first))  # noqa: B023
        for name, other in (("constexpr", KernelLaunch(probe_kernel, (8, 16), run_keywords({}))),
                            ("options", KernelLaunch(probe_kernel, (8, 8), run_keywords({"num_warps": 8})))):
            result[f"bound {name}"] = change(first_kernel, lambda: other((1,), *first),  # noqa: B023
                                             lambda: bound((1,), *first))
    return result


# --- (b): a launch through the fast path hands the driver what the plain path does, for ops --------------------

def _normal(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), tuple(value.stride()), value.storage_offset())
    return value


def op_launches() -> dict:
    from kunlun_triton.ops.spec import all_specs
    from kunlun_triton.tools.inspect_kernels import op_shape
    from kunlun_triton.tools.presets import DEFAULT_PRESET, MODEL_PRESETS

    specs = all_specs()
    preset = MODEL_PRESETS[DEFAULT_PRESET]
    out = {}
    for name, batch, context in (("rms_norm", 8, None), ("fused_add_rms_norm", 8, None), ("silu_and_mul", 8, None),
                                 ("rotary_embedding", 8, None), ("decode_attention", 8, 1024),
                                 ("extend_attention", 2, 64), ("greedy", 8, None), ("sample", 8, None),
                                 ("fused_experts", 8, None), ("moe_topk", 8, None), ("store_kv", 8, None)):
        try:
            shape = op_shape(specs[name], preset, batch, context, None)
            case = specs[name].make_case(shape, torch.bfloat16, "cpu")
            call = case.call or (lambda: case.run(None))
            counter, plain, fast = {}, Recorder(), Recorder()
            with stubbed_below_binder(plain):
                call()  # first call: every launch a miss, through Triton's run()
            kernels = {id(k): k for k in launch_kernels()}
            with stubbed_below_binder(fast):
                count_binders(kernels.values(), counter)
                call()  # second call: hits, through the CompiledKernels' own launchers
            same = len(plain.launches) == len(fast.launches) and all(
                pk is fk and len(pa) == len(fa) and all(a is b or _normal(a) == _normal(b) for a, b in zip(pa, fa))
                for (pk, pa), (fk, fa) in zip(plain.launches, fast.launches))
            out[name] = {"launches": len(fast.launches), "binder_calls": sum(counter.values()), "same": same}
        except Exception:
            out[name] = {"error": traceback.format_exc()[-3000:]}
    return out


def grids_per_call() -> dict:
    """A `LaunchSequence` hit on grids sized per call: fused_experts' decode
    at batch 10, then 12 (one plan, the same argument classes, so one key, but
    other block counts): the second call, a hit on the first's entries,
    hands the driver what Triton's path hands it for that call (recorded
    with ``JITFunction.run`` patched, which the fast path never takes)."""
    from triton.runtime.jit import JITFunction

    from kunlun_triton.ops.spec import all_specs
    from kunlun_triton.tools.inspect_kernels import op_shape
    from kunlun_triton.tools.presets import DEFAULT_PRESET, MODEL_PRESETS

    spec = all_specs()["fused_experts"]
    calls = {}
    for batch in (10, 12):
        case = spec.make_case(op_shape(spec, MODEL_PRESETS[DEFAULT_PRESET], batch, None, None), torch.bfloat16, "cpu")
        calls[batch] = case.call or (lambda case=case: case.run(None))
    counter, first, fast, plain = {}, Recorder(), Recorder(), Recorder()
    with stubbed_below_binder(first):
        calls[10]()  # Triton's path; its CompiledKernels kept under its key, with its grids
    with stubbed_below_binder(fast):
        count_binders(launch_kernels(), counter)
        calls[12]()  # a hit: batch 10's entries, batch 12's grids
    binder_calls = _binder_calls(counter)
    original = JITFunction.run
    JITFunction.run = lambda self, *args, **kwargs: original(self, *args, **kwargs)
    try:
        with stubbed_below_binder(plain):
            calls[12]()
    finally:
        JITFunction.run = original
    same = len(plain.launches) == len(fast.launches) and all(
        pk is fk and len(pa) == len(fa) and all(a is b or _normal(a) == _normal(b) for a, b in zip(pa, fa))
        for (pk, pa), (fk, fa) in zip(plain.launches, fast.launches))
    grids = [[args[:3] for _, args in rec.launches] for rec in (first, plain)]
    return {"launches": len(fast.launches), "binder_calls": binder_calls, "same": same,
            "grids_differ": grids[0] != grids[1]}  # fmt: skip


def launch_kernels():
    """Every JIT kernel of kunlun_triton with a Triton cache on the stub
    device (launched at least once there)."""
    import gc

    return [obj for obj in gc.get_objects() if isinstance(obj, triton.runtime.jit.JITFunction)
            and obj.fn.__module__.startswith("kunlun_triton.") and _StubDriver.DEVICE in obj.device_caches]


def _future_compile(self, key, *args, **kwargs):
    """`stubbed_below_binder`'s compile as async compilation hands it back:
    Triton's FutureKernel (already resolved, to a stub CompiledKernel), not
    a CompiledKernel, cached under the key as `_do_compile` does."""
    from triton.runtime._async_compile import FutureKernel

    future = object.__new__(FutureKernel)  # its constructor differs between Triton 3.8 and 3.9
    future.kernel, future.future = _StubKernel(key), None
    self.device_caches[_StubDriver.DEVICE][0][key] = future
    return future


def plain_path() -> dict:
    """What makes a bound launch (KernelLaunch, LaunchSequence) take Triton's
    path after its arguments were seen: each entry counts Triton's binder
    runs (0: the fast path) or says what Triton did instead."""
    from triton import knobs
    from triton.runtime.jit import JITFunction

    counter, rec = {}, Recorder()
    runtime = (BUFFER, BUFFER, 16, 16, 16, 1.0, True, None)
    out = {}

    def binder_calls(*calls):
        before = _binder_calls(counter)
        for call in calls:
            call()
        return _binder_calls(counter) - before

    def hook(*_, **__):
        pass

    with stubbed_below_binder(rec):
        bound = KernelLaunch(probe_kernel, (8, 8), run_keywords({}))
        steps = LaunchSequence([(KernelLaunch(probe_kernel, (8, 8), run_keywords({})), (1,), None)], 8)
        both = (lambda: bound((1,), *runtime), lambda: steps(runtime))
        for call in both:
            call()  # misses: each keeps the CompiledKernel Triton's run() picked
        first_kernel = rec.launches[-1][0]
        count_binders([probe_kernel], counter)
        out["hit"] = binder_calls(*both)
        for name in ("launch_enter_hook", "launch_exit_hook"):
            getattr(knobs.runtime, name).add(hook)
            try:
                out[name] = binder_calls(*both)
            finally:
                getattr(knobs.runtime, name).remove(hook)
        # a stage-inspection hook joins Triton's key: Triton compiles another kernel, which both launches use
        knobs.runtime.add_stages_inspection_hook = lambda: ("kunlun-triton-probe", "probe")
        try:
            n = len(rec.launches)
            out["stages_inspection_hook"] = [binder_calls(*both),
                                             all(k is not first_kernel for k, _ in rec.launches[n:])]  # fmt: skip
        finally:
            knobs.runtime.add_stages_inspection_hook = None
        probe_kernel.add_pre_run_hook(hook)
        try:
            out["pre_run_hook"] = binder_calls(*both)
        finally:
            probe_kernel.pre_run_hooks.remove(hook)
        out["after_hooks_removed"] = binder_calls(*both)
        out["callable_grid"] = binder_calls(lambda: bound(lambda meta: (1,), *runtime))
        gridded = LaunchSequence([(KernelLaunch(probe_kernel, (8, 8), run_keywords({})), lambda meta: (1,), None)], 8)
        out["sequence_callable_grid"] = [gridded._off, binder_calls(lambda: gridded(runtime), lambda: gridded(runtime))]
        # launch keywords naming a parameter (C1), or without warmup=False: off for good, Triton's path every call
        named = KernelLaunch(probe_kernel, (8,), {"warmup": False, "C1": 8})
        out["keyword_parameter"] = [named.fast_path_allowed, binder_calls(*[lambda: named((1,), *runtime)] * 2),
                                    rec.launches[-1][0] is first_kernel]  # fmt: skip
        warm = KernelLaunch(probe_kernel, (8, 8), {"warmup": True})
        n = len(rec.launches)
        out["warmup"] = [warm.fast_path_allowed, binder_calls(*[lambda: warm((1,), *runtime)] * 2),
                         len(rec.launches) - n]  # fmt: skip
        # a global the kernel reads, changed after a hit: Triton's check refuses the launch; restored: hits again
        gl_bound = KernelLaunch(probe_globals_kernel, (4,), run_keywords({}))
        gl_steps = LaunchSequence([(KernelLaunch(probe_globals_kernel, (4,), run_keywords({})), (1,), None)], 2)
        gl_both = (lambda: gl_bound((1,), BUFFER, 16), lambda: gl_steps((BUFFER, 16)))
        for call in gl_both:
            call()
        probe_globals_kernel.cache_key  # noqa: B018  a real compile hashes the source: that records its globals
        count_binders([probe_globals_kernel], counter)
        raised = []
        globals()["GLOBAL_WIDTH"] = tl.constexpr(8)
        try:
            for call in gl_both:
                try:
                    call()
                    raised.append(False)
                except RuntimeError as error:
                    raised.append("GLOBAL_WIDTH" in str(error))
        finally:
            globals()["GLOBAL_WIDTH"] = tl.constexpr(4)
        out["used_global_changed"] = [*raised, binder_calls(*gl_both)]
        # async compilation: Triton hands back a FutureKernel, which is launched but never kept
        saved = JITFunction.__dict__["_do_compile"]
        JITFunction._do_compile = _future_compile
        try:
            future = KernelLaunch(probe_async_kernel, (4,), run_keywords({}))
            returned = future((1,), BUFFER, 16)
            count_binders([probe_async_kernel], counter)
            n = len(rec.launches)
            out["async_compile"] = [type(returned).__name__, binder_calls(*[lambda: future((1,), BUFFER, 16)] * 2),
                                    len(rec.launches) - n]  # fmt: skip
        finally:
            JITFunction._do_compile = saved
    # first seen while JITFunction.run is patched (a stub at run()): Triton's (patched) run, fast once it is back
    patched = KernelLaunch(probe_patched_kernel, (4,), run_keywords({}))
    stubbed = record_launches(lambda: patched((1,), BUFFER, 16))
    with stubbed_below_binder(rec):
        patched((1,), BUFFER, 16)
        count_binders([probe_patched_kernel], counter)
        kept = binder_calls(lambda: patched((1,), BUFFER, 16))
    # and patched again after a hit: the patched run() sees the launch
    out["patched_run"] = [len(stubbed), kept, len(record_launches(lambda: patched((1,), BUFFER, 16)))]
    return out


def main() -> None:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with targeting(Target("cuda", "sm_90", "cpu", "test")):
        result = {"oracle": oracle(examples), "changes": changes_after_a_hit(), "ops": op_launches(), "grids_per_call": grids_per_call(),
                  "plain_path": plain_path()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
