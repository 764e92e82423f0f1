"""The compiled-mode side of tests/ops/test_fast_launch.py: run as a child
without TRITON_INTERPRET (Triton's binder exists only for compiled kernels),
the driver stubbed below the binder (`introspect.launches.stubbed_below_binder`:
Triton's own JITFunction.run down to the driver's launch, compiles stood in
by one stub CompiledKernel per Triton cache key). Prints one JSON line.

The oracle is Triton itself: for every launch, the CompiledKernel the fast
path (`ops.fast_launch.run_kernel`, and `ops.launch`'s KernelLaunch and
LaunchSequence) hands the driver must be the one Triton's own
``kernel.run`` hands it for the same arguments (found under Triton's cache
key), with the same grid, stream, function, metadata, hooks and arguments.
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

from kunlun_triton.introspect.launches import _StubDriver, record_launches, stubbed_below_binder
from kunlun_triton.ops import fast_launch
from kunlun_triton.ops.launch import KernelLaunch, LaunchSequence, run_kernel, run_keywords
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


def check_against_triton(sequence, kernel, bound: dict):
    """Every launch through run_kernel, through a `KernelLaunch` (one per
    constexprs and options, kept in `bound` across sequences) and through a
    two-step `LaunchSequence` (`kernel` on the arguments, then probe_kernel
    on a permutation of them) hands the driver the CompiledKernels and the
    arguments Triton's own run() does for the same launches."""
    swap = operator.itemgetter(1, 0, 3, 2, 4, 5, 6, 7)
    for runtime, c0, c1, options in sequence:
        args = (*runtime, c0, c1)
        plain, swapped = Recorder(), Recorder()
        with stubbed_below_binder(plain):
            kernel.run(*args, grid=(3, 2), warmup=False, **options)
        with stubbed_below_binder(swapped):
            probe_kernel.run(*swap(runtime), c0, c1, grid=(2,), warmup=False, **options)
        fast = Recorder()
        with stubbed_below_binder(fast):
            run_kernel(kernel, *args, grid=(3, 2), warmup=False, **options)
        _same_launch(fast.launches, plain.launches, ("run_kernel", args, options))
        key = (_constexpr_id(c0), _constexpr_id(c1), tuple(sorted(options.items())))
        if key not in bound:
            bind = lambda k: KernelLaunch(k, (c0, c1), run_keywords(options))  # noqa: E731
            bound[key] = (bind(kernel), LaunchSequence([(bind(kernel), (3, 2), None), (bind(probe_kernel), (2,), swap)],
                                                       len(runtime)))  # fmt: skip
        single, steps = bound[key]
        fast = Recorder()
        with stubbed_below_binder(fast):
            single((3, 2), *runtime)
        _same_launch(fast.launches, plain.launches, ("KernelLaunch", args, options))
        fast = Recorder()
        with stubbed_below_binder(fast):
            steps(tuple(runtime))
        _same_launch(fast.launches[:1], plain.launches, ("LaunchSequence step 1", args, options))
        _same_launch(fast.launches[1:], swapped.launches, ("LaunchSequence step 2", args, options))


def oracle(examples: int) -> dict:
    out = {}
    for kernel in (probe_kernel, probe_flags_kernel):
        name = kernel.fn.__name__

        @settings(max_examples=examples, deadline=None, database=None, derandomize=bool(os.environ.get("CI")),
                  suppress_health_check=list(HealthCheck))  # derandomized under CI, as the suite's "ci" profile
        @given(st.lists(launch_tuple(), min_size=1, max_size=12))
        def holds(sequence):
            check_against_triton(sequence, kernel, bound)

        bound = {}
        try:
            holds()
            state = kernel.__dict__[fast_launch._STATE]
            hits = [len(single._entries) + len(steps._entries) for single, steps in bound.values()]
            out[name] = {"ok": True, "entries": len(state.entries), "bound_entries": sum(hits)}
        except Exception:
            out[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    return out


def changes_after_a_hit() -> dict:
    """A hit, then a changed alignment / int class: Triton's path (its binder
    runs) and another CompiledKernel; back to the first arguments: the first
    CompiledKernel, from the fast path (no binder)."""
    counter, rec = {}, Recorder()
    base = BUFFERS[torch.float32]
    aligned, misaligned = base[0:], base[1:]
    first = (aligned, aligned, 16, 16, 16, 1.0, True, None, 8, 8)
    variants = {
        "alignment": (misaligned, aligned, 16, 16, 16, 1.0, True, None, 8, 8),
        "divisibility": (aligned, aligned, 17, 16, 16, 1.0, True, None, 8, 8),
        "one": (aligned, aligned, 1, 16, 16, 1.0, True, None, 8, 8),
        "i64": (aligned, aligned, 2**31, 16, 16, 1.0, True, None, 8, 8),
        "dtype": (BUFFERS[torch.bfloat16], aligned, 16, 16, 16, 1.0, True, None, 8, 8),
        "none": (aligned, aligned, 16, 16, None, 1.0, True, None, 8, 8),
        "constexpr": (aligned, aligned, 16, 16, 16, 1.0, True, None, 8, 16),
    }
    result = {}
    with stubbed_below_binder(rec):
        run_kernel(probe_kernel, *first, grid=(1,), warmup=False)
        count_binders([probe_kernel], counter)
        run_kernel(probe_kernel, *first, grid=(1,), warmup=False)
        first_kernel = rec.launches[0][0]
        result["hit"] = {"binder": counter.get("probe_kernel", 0), "same": rec.launches[1][0] is first_kernel}
        for name, args in variants.items():
            before = counter.get("probe_kernel", 0)
            run_kernel(probe_kernel, *args, grid=(1,), warmup=False)
            changed = rec.launches[-1][0]
            run_kernel(probe_kernel, *first, grid=(1,), warmup=False)
            back = rec.launches[-1][0]
            result[name] = {"binder": counter.get("probe_kernel", 0) - before, "new": changed is not first_kernel,
                            "triton_key_differs": changed.key != first_kernel.key,
                            "back_to_first": back is first_kernel}
        # the same through a KernelLaunch and a one-step LaunchSequence (their constexprs are fixed)
        bound = KernelLaunch(probe_kernel, first[-2:], run_keywords({}))
        steps = LaunchSequence([(KernelLaunch(probe_kernel, first[-2:], run_keywords({})), (1,), None)], 8)
        for kind, launch_first, launch_args in (("bound", lambda: bound((1,), *first[:-2]), lambda a: bound((1,), *a)),
                                                ("sequence", lambda: steps(first[:-2]), lambda a: steps(a))):
            launch_first()  # a hit: the CompiledKernel found above
            for name, args in variants.items():
                if name == "constexpr":
                    continue
                before = counter.get("probe_kernel", 0)
                launch_args(args[:-2])
                changed = rec.launches[-1][0]
                launch_first()
                back = rec.launches[-1][0]
                result[f"{kind} {name}"] = {"binder": counter.get("probe_kernel", 0) - before,
                                            "new": changed is not first_kernel,
                                            "triton_key_differs": changed.key != first_kernel.key,
                                            "back_to_first": back is first_kernel}  # fmt: skip
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


def launch_kernels():
    """Every JIT kernel of kunlun_triton with a Triton cache on the stub
    device (launched at least once there)."""
    import gc

    return [obj for obj in gc.get_objects() if isinstance(obj, triton.runtime.jit.JITFunction)
            and obj.fn.__module__.startswith("kunlun_triton.") and _StubDriver.DEVICE in obj.device_caches]


def hooks_and_patches() -> dict:
    """A launch hook set, a pre-run hook, or a patched JITFunction.run: the
    plain path (Triton's binder runs on every launch)."""
    from triton import knobs

    counter, rec = {}, Recorder()
    args = (BUFFER, BUFFER, 16, 16, 16, 1.0, True, None, 8, 8)
    out = {}
    with stubbed_below_binder(rec):
        run_kernel(probe_kernel, *args, grid=(1,), warmup=False)
        count_binders([probe_kernel], counter)

        def hook(*_, **__):
            pass

        knobs.runtime.launch_enter_hook.add(hook)
        try:
            run_kernel(probe_kernel, *args, grid=(1,), warmup=False)
        finally:
            knobs.runtime.launch_enter_hook.remove(hook)
        out["launch_enter_hook"] = counter.get("probe_kernel", 0)
        probe_kernel.add_pre_run_hook(hook)
        try:
            run_kernel(probe_kernel, *args, grid=(1,), warmup=False)
        finally:
            probe_kernel.pre_run_hooks.remove(hook)
        out["pre_run_hook"] = counter.get("probe_kernel", 0) - out["launch_enter_hook"]
        before = counter.get("probe_kernel", 0)
        run_kernel(probe_kernel, *args, grid=(1,), warmup=False)
        out["after_hooks_removed"] = counter.get("probe_kernel", 0) - before
        before = counter.get("probe_kernel", 0)
        run_kernel(probe_kernel, *args, grid=lambda meta: (1,), warmup=False)
        out["callable_grid"] = counter.get("probe_kernel", 0) - before
    # first seen while JITFunction.run is patched (a stub at run()): plain then, fast once it is back
    stubbed = record_launches(lambda: run_kernel(probe_patched_kernel, BUFFER, 16, 4, grid=(1,), warmup=False))
    with stubbed_below_binder(rec):
        run_kernel(probe_patched_kernel, BUFFER, 16, 4, grid=(1,), warmup=False)
        count_binders([probe_patched_kernel], counter)
        run_kernel(probe_patched_kernel, BUFFER, 16, 4, grid=(1,), warmup=False)
    out["patched_run_then_original"] = [len(stubbed), counter.get("probe_patched_kernel", 0)]
    return out


def main() -> None:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with targeting(Target("cuda", "sm_90", "cpu", "test")):
        result = {"oracle": oracle(examples), "changes": changes_after_a_hit(), "ops": op_launches(),
                  "plain_path": hooks_and_patches()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
