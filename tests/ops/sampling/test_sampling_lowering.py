"""Every sampling kernel compiles ahead of time, as the ops launch it: the
specs come from `OpSpec.kernels` and `ops.sample_plan` (the launch plan the
launchers themselves use). The CUDA plan at vocab 151936 lowers for sm_90;
its two row-reading kernels, and the renorm kernel, for gfx942 too; Kunlun's
plan (IGNORES_OTHER: masked lanes filled with tl.where, 8192-token blocks)
for sm_90. About 15 compilations, so the set is chosen, not exhaustive."""

import pytest
import torch

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.sass import kernel_cost
from kunlun_triton.ops.sampling import ops, renorm, tree_sampling
from kunlun_triton.ops.spec import all_specs
from kunlun_triton.runtime import get_config
from kunlun_triton.testing import assert_lowers, shipped_target

# Run again in the sglang stage, on the Triton SGLang brings (scripts/test.sh).
pytestmark = pytest.mark.lowering

VOCAB = 151936


def _plan_specs(target, dtype=torch.bfloat16):
    config = ops._config("sample", VOCAB, get_config("sample", target=target, vocab=VOCAB))
    specs = ops.plan_kernel_specs(ops.sample_plan(1, VOCAB, config, target=target), ops.sample_arg_dtypes(dtype))
    return list({spec.label: spec for spec in specs}.values())


def test_every_op_has_its_kernels():
    for name, spec in all_specs(("sampling",)).items():
        kernels = spec.kernels({"batch": 3, "vocab": 5000}, torch.float32, None)
        assert kernels and all(k.kernel.startswith("kunlun_triton.ops.sampling.") for k in kernels), name


def test_sampling_kernels_lower():
    cuda, kunlun = shipped_target("cuda"), shipped_target("kunlun")
    assert (cuda.name, kunlun.name) == ("cuda", "kunlun")
    specs = all_specs(("sampling",))
    # the last round's decide_kernel holds all of the others' code
    cuda_plan = [s for s in _plan_specs(cuda) if s.constexprs.get("LAST", True)]
    renorm_specs = renorm.renorm_kernel_specs("renorm_probs", 4, VOCAB, torch.float32, None, target=cuda)
    kunlun_stats = [s for s in _plan_specs(kunlun, torch.float16) if s.kernel.endswith("block_stats_kernel")]
    assert [s.constexprs["IGNORES_OTHER"] for s in kunlun_stats] == [True]
    greedy = specs["greedy"].kernels({"batch": 1, "vocab": VOCAB}, torch.float16, None)
    one_tile = specs["top_p_renorm_probs"].kernels({"batch": 4, "vocab": 1000}, torch.bfloat16, None)
    assert_lowers(cuda_plan + renorm_specs + kunlun_stats + greedy + one_tile, targets=("cuda",))
    assert_lowers([s for s in cuda_plan if s.kernel.endswith("block_stats_kernel")] + renorm_specs, targets=("hip",))


@pytest.mark.parametrize("draft", [8, 64])
def test_tree_speculative_sampling_lowers_without_spills(draft):
    """The verify kernel at vocab 151936 for EAGLE's usual 8 draft tokens and
    a 64-token tree: sm_90 (CUDA's plan and Kunlun's masked loads) and
    gfx942, every build without a spill."""
    cuda, hip, kunlun = (shipped_target(name) for name in ("cuda", "hip", "kunlun"))
    assert (cuda.name, hip.name, kunlun.name) == ("cuda", "hip", "kunlun")
    op = "tree_speculative_sampling_target_only"
    jobs = [(tree_sampling.tree_kernel_specs(4, draft, 4, VOCAB, get_config(op, target=t, vocab=VOCAB), target=t), aot)
            for t, aot in ((cuda, "cuda"), (kunlun, "cuda"), (hip, "hip"))]  # fmt: skip
    assert jobs[1][0][0].constexprs["IGNORES_OTHER"] and not jobs[0][0][0].constexprs["IGNORES_OTHER"]
    for specs, aot in jobs:
        for result in compile_ahead_of_time(specs, targets=(aot,), artifacts=True):
            assert result["ok"], result.get("error")
            cost = kernel_cost(result)
            assert cost["spill_bytes"] == 0, f"{aot} {result['spec'].label}: {cost}"
