"""The fast launch path (`ops.fast_launch`, issue 24): on a compiled
target a launch whose cheap key was seen replays the CompiledKernel Triton
returned for it, through that kernel's own launcher, without Triton's binder.

Held to Triton itself, in a child without TRITON_INTERPRET (compiled-mode
kernels, the driver stubbed below the binder, one stub CompiledKernel per
Triton cache key; tests/ops/fast_launch_child.py), through `KernelLaunch`
(a kernel bound to its constexprs and options, keyed on its runtime
arguments) and `LaunchSequence` (launches keyed once over the tuple they
pick from), which the ops launch through:
(a) hypothesis over tensors at every element offset and dtype, ints at the
    binder's boundaries (1, 16-divisibility, i32 / i64 / u64), None, floats,
    bools, constexprs (1 / True / 1.0, 0.0 / -0.0) and options, in sequences
    replayed last first so that launches hit earlier keys: each launch hands
    the driver the CompiledKernel Triton's own run() picks (its cache key)
    and the same arguments, also with do_not_specialize(_on_alignment)
    parameters;
(b) for real ops, a second call (every launch a hit, no binder) hands the
    driver exactly what the first (Triton's run()) did;
(c) a changed alignment, int class, dtype or None after a hit goes through
    Triton (its binder) to another CompiledKernel, and the first arguments
    come back to the first CompiledKernel; another constexpr or option is
    another bound launch, which Triton serves;
(d) launch or stage-inspection hooks, pre-run hooks, callable grids,
    keywords naming parameters, warmup, a changed global, async
    compilation and a patched ``JITFunction.run`` take Triton's path;
(e) interpreted kernels never take it (the rest of the suite runs them).
Marked `lowering` so the sglang stage checks it again on SGLang's Triton
(3.8): the fast path mirrors each verified Triton's JITFunction.run.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.lowering

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 60  # hypothesis sequences (up to 12 launches each) per probe kernel


@pytest.fixture(scope="module")
def child():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("fast_launch_child.py")), str(EXAMPLES)],
                          capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel", ["probe_kernel", "probe_flags_kernel"])
def test_fast_path_launches_the_compiled_kernel_triton_picks(child, kernel):
    result = child["oracle"][kernel]
    assert result["ok"], result.get("error")
    assert result["triton_keys"] > 1  # the sequences reached several specialisations
    # one bound launch kept several, and the replays took the fast path: the oracle saw hits, not only misses
    assert result["single_entries"] > 1 and result["sequence_entries"] > 1, result
    assert result["single_hits"] > result["launches"] // 4 and result["sequence_hits"] > result["launches"] // 4, result


KINDS = ["bound", "sequence", "generic bound", "generic sequence"]  # generic: keyed by key_function's fallback


@pytest.mark.parametrize("kind", KINDS)
def test_a_hit_skips_the_binder(child, kind):
    assert child["changes"][f"{kind} hit"] == {"binder": 0, "same": True}


CHANGES = ["alignment", "divisibility", "one", "i64", "dtype", "none"]


@pytest.mark.parametrize("change", [*(f"{k} {c}" for k in KINDS for c in CHANGES), "bound constexpr", "bound options"])
def test_a_changed_specialisation_goes_back_to_triton(child, change):
    result = child["changes"][change]
    assert result == {"binder": 1, "new": True, "triton_key_differs": True, "back_to_first": True}, result


OPS = ["rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "decode_attention", "extend_attention",
       "greedy", "sample", "fused_experts", "moe_topk", "store_kv"]  # fmt: skip


@pytest.mark.parametrize("op", OPS)
def test_op_launches_hand_the_driver_what_triton_does(child, op):
    result = child["ops"][op]
    assert "error" not in result, result.get("error")
    assert result["launches"] >= 1 and result["same"], result
    assert result["binder_calls"] == 0, result  # every launch of the second call took the fast path


def test_a_sequence_hit_launches_on_this_calls_grids(child):
    result = child["grids_per_call"]
    assert result["grids_differ"], result  # the two calls' grids are not the same
    assert result["launches"] == 4 and result["binder_calls"] == 0, result  # one key for both calls: a hit
    assert result["same"], result  # and on the second call's grids, as Triton's path launches


PLAIN_PATH = {
    "hit": 0,  # the KernelLaunch and the LaunchSequence below: both hit, no binder
    "launch_enter_hook": 2, "launch_exit_hook": 2, "pre_run_hook": 2,
    "stages_inspection_hook": [2, True],  # Triton's key takes the hook: another kernel, which both launch
    "after_hooks_removed": 0,
    "callable_grid": 1, "sequence_callable_grid": [True, 2],
    "keyword_parameter": [False, 2, True],  # off for good; Triton serves the kernel the positional launch got
    "warmup": [False, 2, 0],  # Triton compiles (its binder runs), nothing launched
    "used_global_changed": [True, True, 0],  # Triton's own refusal, from both; restored: hits again
    "async_compile": ["FutureKernel", 2, 2],  # launched, never kept
    "patched_run": [1, 0, 1],  # patched: its run() sees it; then original: kept; patched again: seen again
}


@pytest.mark.parametrize("situation", sorted(PLAIN_PATH))
def test_bound_launches_take_triton_path_when_they_must(child, situation):
    assert child["plain_path"][situation] == PLAIN_PATH[situation]


def test_interpreted_kernels_never_take_the_fast_path():
    from triton.runtime.interpreter import InterpretedFunction

    from kunlun_triton.ops import rms_norm
    from kunlun_triton.ops.norm import ops as norm_ops
    from kunlun_triton.ops.norm.kernels import rms_norm_kernel

    assert isinstance(rms_norm_kernel, InterpretedFunction)  # the suite runs under TRITON_INTERPRET
    x, w = torch.randn(3, 64), torch.rand(64) + 0.5
    out = rms_norm(x, w, 1e-6)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert not norm_ops._cached_plan("rms_norm", 64).launch.fast_path_allowed


def test_fast_launch_is_a_capability_of_cuda_and_hip_only():
    from kunlun_triton.runtime.capabilities import fast_launch_backend

    assert fast_launch_backend("cuda") and fast_launch_backend("hip")
    # Kunlun's Triton fork (its own JITFunction.run), the interpreter, a backend not profiled
    assert not any(fast_launch_backend(b) for b in ("kunlun", "xpu", "interpreter", "torch", "cpu"))
