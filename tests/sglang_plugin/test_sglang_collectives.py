"""SGLang's GroupCoordinator collectives on the kunlun platform run through
our TPCommunicator (two CPU processes, gloo): all-reduce (fp32 and fp16),
all-gather (both dims and into a tensor), reduce-scatter, their uneven forms
(``all_gatherv`` / ``reduce_scatterv``, an idle rank included) and broadcast equal
the answer computed from every rank's input, and each is recorded in the
dispatch report as ``kunlun_triton.comm``. The engine-level check is in
test_sglang_engine_qwen2_tp.py."""

from __future__ import annotations

import socket

import torch.multiprocessing as mp

import kt_collective_workers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_group_coordinator_collectives_go_through_our_communicator():
    mp.spawn(kt_collective_workers.run, args=(2, _free_port()), nprocs=2, join=True)
