"""Every W8A8-INT8 kernel lowers ahead of time, as the launchers plan it at the
shipped configs (`OpSpec.kernels`), for CUDA sm_90 and HIP gfx942 (int8
``tl.dot``) and Kunlun (its ``sum`` plans compiled for sm_90 as a proxy),
decode and prefill tiles, ragged K, bias or not, fp16 and bf16 outputs;
none spills."""

import torch

from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.testing import LOWERING_TARGETS, aot_target
from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.sass import kernel_cost

SHAPES = {
    "per_token_quant_int8": [{"rows": 7, "d": 576}, {"rows": 4096, "d": 14336}],
    # decode, prefill (the m >= 1024 tiles), K ragged against the tiles with a bias. K stays
    # a multiple of 16 as in every model's layers: rows only 8-byte aligned (K = 1000)
    # compile to 255 registers on sm_90 (no 16-byte vector loads of int8 rows).
    "int8_scaled_mm": [{"m": 1, "n": 1536, "k": 576}, {"m": 2048, "n": 4096, "k": 4096},
                       {"m": 40, "n": 100, "k": 1008, "bias": True}],
}  # fmt: skip


def test_quant_kernels_lower_without_spills():
    jobs = []
    for target in LOWERING_TARGETS:
        for op, shapes in SHAPES.items():
            for i, shape in enumerate(shapes):
                dtype = torch.bfloat16 if i % 2 else torch.float16
                planned = planned_kernels(op, shape, dtype, target)
                if op == "int8_scaled_mm":
                    want = 2 if target.name == "kunlun" else 0  # sum there; int8 dot elsewhere
                    assert all(s.constexprs["FORMULATION"] == want for s in planned), (target, planned)
                jobs += [(spec, aot_target(target)) for spec in planned]
    assert {spec.name for spec, _ in jobs} == {"per_token_quant_int8_kernel", "scaled_mm_kernel"}
    results = compile_ahead_of_time(jobs, artifacts=True)
    failures = [f"{r['spec'].label} on {r['target']}: {r.get('error')}" for r in results if not r["ok"]]
    assert not failures, "\n".join(failures)
    for r in results:
        cost = kernel_cost(r)
        assert cost["spill_bytes"] == 0, f"{r['spec'].label} on {r['target']}: {cost}"
