"""Collectives over ``torch.distributed`` for tensor-, expert- and
attention-data-parallel groups, backend chosen by target (nccl on
Kunlun/CUDA/ROCm, gloo on CPU), with timeouts that name the collective and
group instead of hanging; uneven all-to-all / all-gather / reduce-scatter
for expert dispatch and DP attention."""

from .communicator import TPCommunicator, init_tp_group
from .setup import CollectiveError, CollectiveTimeout, default_backend

__all__ = ["CollectiveError", "CollectiveTimeout", "TPCommunicator", "default_backend", "init_tp_group"]
