"""Tensor-parallel collectives over ``torch.distributed``, backend chosen by
target (nccl on Kunlun/CUDA/ROCm, gloo on CPU), with timeouts that name the
collective and group instead of hanging."""

from .communicator import (
    CollectiveError,
    CollectiveTimeout,
    TPCommunicator,
    default_backend,
    init_tp_group,
)

__all__ = ["CollectiveError", "CollectiveTimeout", "TPCommunicator", "default_backend", "init_tp_group"]
