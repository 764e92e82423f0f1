"""What attention sinks cost, from the sm_90 machine code (`kunlun-triton
inspect --shape sinks=0,1`: both plans compiled in one run): the loops over
keys are the same kernels' (SASS per key within 2%, the issue's bound),
registers, spills and occupancy unchanged; the sink is a few instructions
after them (the merge: one register more on Triton 3.9, occupancy the same)."""

import torch

from kunlun_triton.runtime import Target
from kunlun_triton.tools.inspect_kernels import inspect_ops, resolve_preset

SM90 = Target("cuda", "sm_90", "meta", "test")


def test_sinks_cost_at_most_two_percent_sass_per_key():
    report = inspect_ops(["decode_attention", "extend_attention"], SM90, resolve_preset("llama-3-8b"),
                         torch.bfloat16, batch=1, context=1024, overrides={"sinks": [0, 1]})  # fmt: skip
    for op in ("decode_attention", "extend_attention"):
        without, with_sinks = report["ops"][f"{op}[sinks=0]"], report["ops"][f"{op}[sinks=1]"]
        assert not without["shape"]["sinks"] and with_sinks["shape"]["sinks"]
        for a, b in zip(without["kernels"], with_sinks["kernels"], strict=True):
            assert a["kernel"] == b["kernel"] and "error" not in a and "error" not in b, (a, b)
            assert b["spill_bytes"] == a["spill_bytes"] == 0
            assert b["occupancy"] == a["occupancy"], (b["kernel"], a["occupancy"], b["occupancy"])
            if a["sass_per_item"]:  # the main loop over keys: the same registers, within 2% a key
                assert b["regs"] == a["regs"], (b["kernel"], a["regs"], b["regs"])
                assert b["sass_per_item"] <= 1.02 * a["sass_per_item"], (b["kernel"], a["sass_per_item"], b["sass_per_item"])
            else:  # the merge: the sink once per head after its loop over splits (Triton 3.9: 31 -> 32 registers)
                assert b["regs"] <= a["regs"] + 8, (b["kernel"], a["regs"], b["regs"])
                assert a["sass_total"] < b["sass_total"] <= a["sass_total"] + 64, (a["sass_total"], b["sass_total"])
    # the sink is planned where asked only (HAS_SINKS a constexpr: kernels without sinks pay nothing)
    merge = {label: [k for k in op["kernels"] if k["kernel"] == "decode_merge_kernel"][0]
             for label, op in report["ops"].items() if label.startswith("decode")}  # fmt: skip
    assert merge["decode_attention[sinks=0]"]["constexprs"]["HAS_SINKS"] is False
    assert merge["decode_attention[sinks=1]"]["constexprs"]["HAS_SINKS"] is True
