"""SGLang's parallel modes on the kunlun platform, each over two CPU
processes (gloo) with a tiny random Llama, greedy tokens against HF
transformers eager float32 one by one, batched and on radix-cache second
turns, and every rank's dispatch report showing our kernels (TP 2 on one
node is a row of the engine matrix; expert parallelism and DP attention have
their own files).

Each engine runs in a process of its own (kt_scale_out.serve_in_process), so a
hung engine fails its test at the timeout. CI's quick form is TP 2 as two
nodes; PP 2 and DP 2 are `slow` (``KUNLUN_TRITON_SLOW=1``; results in
docs/scale-out.md)."""

from __future__ import annotations

import pytest
from kt_scale_out import CHUNK, check_reports, compare_served, expectations, serve_in_process

ATTENTION = ("extend_attention", "decode_attention", "fused_add_rms_norm", "silu_and_mul")


def _serve(tiny_llama, hf_llama, options, ranks, collectives=(), nodes=1):
    prefix, asked, expected = expectations(hf_llama)
    result = serve_in_process(tiny_llama, {**options, "chunked_prefill_size": CHUNK}, asked, nodes=nodes)
    compare_served(result, prefix, expected)
    return check_reports(result["reports"], ranks, ATTENTION, collectives, moe=False)


def test_tp2_as_two_nodes_on_loopback_equals_hf(tiny_llama, hf_llama):
    """``--nnodes 2 --node-rank 0/1 --dist-init-addr 127.0.0.1:PORT``: two
    servers with their own ports, one TP rank each, the all-reduce through our
    communicator."""
    reports = _serve(tiny_llama, hf_llama, {"tp_size": 2}, 2, ("all_reduce",), nodes=2)
    assert [reports[r]["tp_rank"] for r in (0, 1)] == [0, 1]


@pytest.mark.slow
def test_pp2_equals_hf(tiny_llama, hf_llama):
    """``--pp-size 2``: one layer per stage, the activations passed between them."""
    reports = _serve(tiny_llama, hf_llama, {"pp_size": 2}, 2)
    assert [reports[r]["pp_rank"] for r in (0, 1)] == [0, 1]


@pytest.mark.slow
def test_dp2_equals_hf(tiny_llama, hf_llama):
    """``--dp-size 2``: two replicas under SGLang's data-parallel controller, the requests split between them."""
    reports = _serve(tiny_llama, hf_llama, {"dp_size": 2}, 2)
    assert [reports[r]["dp_rank"] for r in (0, 1)] == [0, 1]
