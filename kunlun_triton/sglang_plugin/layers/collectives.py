"""SGLang's tensor-parallel collectives through ``kunlun_triton.comm``.

SGLang 0.5.23 never asks the platform for a communicator
(``get_communicator_class`` has no caller): every collective of the model
goes through ``GroupCoordinator`` (``sglang/srt/distributed/parallel_state.py``)
on its ``device_group``. On the kunlun platform we put AROUND hooks on the
coordinator's methods with SGLang's own plugin hook registry
(``sglang/srt/plugins/hook_registry.py``), so each one runs on a
:class:`~kunlun_triton.comm.TPCommunicator` built over that coordinator's
``device_group`` and is recorded in the dispatch report (impl
``kunlun_triton.comm``).

What the TP model path calls, read from the installed source (graph capture
off, as our platform sets it):

- ``all_reduce``: row-parallel linears and the vocab-parallel embedding
  (``tensor_model_parallel_all_reduce``). On CPU SGLang would call
  ``torch.distributed.all_reduce`` (or sgl_kernel's shm all-reduce) itself;
  on a device it goes through the custom ops ``inplace_all_reduce`` /
  ``outplace_all_reduce``, which land in ``_all_reduce_in_place`` (hooked as
  well) or in a vendor communicator we bypass by taking ``all_reduce`` whole;
- ``all_gather``: the vocab-parallel logits (``tensor_model_parallel_all_gather``);
  ``all_gather_into_tensor`` (logits helpers, DP attention) and
  ``_all_gather_into_tensor``, behind the custom op ``reg_all_gather_into_tensor``;
- ``reduce_scatter_tensor`` (also behind ``reduce_scatter_along_dim``) and
  ``_reduce_scatter_tensor``, behind ``reg_reduce_scatter_tensor``;
- ``all_gatherv`` / ``reduce_scatterv``: DP attention's gather and scatter
  around the experts under expert parallelism (pynccl only in SGLang);
- ``broadcast`` (tensor broadcast on the device group).

Left on SGLang's path, on purpose: ``barrier`` (SGLang runs it on the gloo CPU
group, not the device group, and only graph runners call it), object
broadcasts and send/recv (pickled metadata on the CPU group), the list form
of ``reduce_scatter``/``all_gather``, ``all_to_all`` and the fused
all-reduce+RMSNorm (ROCm only; returns None elsewhere). Under
``torch.compile`` tracing the hooks step aside: our wait-with-timeout is not
traceable.
"""

from __future__ import annotations


import torch

COORDINATOR = "sglang.srt.distributed.parallel_state.GroupCoordinator"
IMPL = "kunlun_triton.comm"
_ATTR = "_kunlun_triton_comm"


def communicator(coord):
    """The TPCommunicator over `coord`'s device group, built on first use.

    Its timeout is ``KUNLUN_TRITON_COMM_TIMEOUT_S`` (default 600 s: SGLang's
    own gloo groups wait two hours, but a collective of the model waits only
    as long as the slowest rank's forward), read and checked by
    TPCommunicator: an invalid value is an error naming the variable. Checked
    mode (``KUNLUN_TRITON_COMM_CHECKED``) follows the backend: on for gloo
    (development mode on the CPU), off on a device, where SGLang's TP ranks
    run the same forward on the same batch, so shapes always agree."""
    comm = coord.__dict__.get(_ATTR)
    if comm is None:
        from kunlun_triton.comm import TPCommunicator

        comm = TPCommunicator(coord.device_group, name=coord.unique_name)
        setattr(coord, _ATTR, comm)
    return comm


def _ours(coord) -> bool:
    return coord.world_size > 1 and coord.device_group is not None and not torch.compiler.is_compiling()


def _record(op: str, comm) -> None:
    from kunlun_triton.runtime import record_dispatch

    record_dispatch(op, IMPL, f"TPCommunicator on SGLang group {comm.name} ({comm.backend})")


def _deterministic() -> bool:
    from sglang.srt.environ import envs

    return bool(envs.SGLANG_ENABLE_DETERMINISTIC_INFERENCE.get())


# AROUND hooks: ``hook(original, self, *args, **kwargs)``.


def all_reduce(original, self, input_):
    if not _ours(self):
        return original(self, input_)
    comm = communicator(self)
    comm.all_reduce(input_)  # in place, as SGLang's own CPU path
    _record("all_reduce", comm)
    return input_


def all_reduce_in_place(original, self, input_):
    if not _ours(self):
        return original(self, input_)
    comm = communicator(self)
    comm.all_reduce(input_)
    _record("all_reduce", comm)


def all_gather(original, self, input_, dim=-1, output_tensor_list=None):
    if output_tensor_list is not None or not _ours(self):
        return original(self, input_, dim, output_tensor_list)
    comm = communicator(self)
    out = comm.all_gather(input_, dim % input_.dim()).contiguous()  # SGLang's result is contiguous
    _record("all_gather", comm)
    return out


def all_gather_into_tensor(original, self, output, input):
    if not _ours(self):
        return original(self, output, input)
    comm = communicator(self)
    # torch accepts `output` concatenated ([W*n, ...]) or stacked ([W, n, ...]):
    # the bytes are in the same order either way.
    output.copy_(comm.all_gather(input, 0).reshape(output.shape))
    _record("all_gather", comm)


def reduce_scatter_tensor(original, self, output, input):
    if not _ours(self) or _deterministic():  # SGLang's deterministic path all-reduces (ours)
        return original(self, output, input)
    comm = communicator(self)
    output.copy_(comm.reduce_scatter(input, 0).reshape(output.shape))
    _record("reduce_scatter", comm)
    return output


def all_gatherv(original, self, input_, sizes=None, output=None):
    """SGLang's uneven gather (pynccl only there: DP attention's gathers with
    expert parallelism, ``SGLANG_DP_USE_GATHERV``): each tensor of `input_`
    gathered by `sizes` rows per rank (even when None); a list back, as SGLang's."""
    if not _ours(self):
        return original(self, input_, sizes, output)
    comm = communicator(self)
    tensors = [input_] if isinstance(input_, torch.Tensor) else list(input_)
    if output is not None and len(tensors) != 1:
        raise ValueError("all_gatherv `output` requires a single-tensor input")  # SGLang's own check
    outs = [comm.all_gatherv(t, sizes if sizes is not None else [t.shape[0]] * self.world_size, out=output)
            for t in tensors]  # fmt: skip
    _record("all_gather", comm)
    return outs


def reduce_scatterv(original, self, input_, output=None, sizes=None):
    """SGLang's uneven reduce-scatter (pynccl only there: DP attention's scatter
    with expert parallelism): rows ``sizes[rank]`` of the group's sum (even split when None)."""
    if not _ours(self) or _deterministic():  # SGLang's deterministic path all-reduces (ours)
        return original(self, input_, output, sizes)
    comm = communicator(self)
    if sizes is None:
        sizes = [input_.shape[0] // self.world_size] * self.world_size
    out = comm.reduce_scatterv(input_, sizes, out=output)
    _record("reduce_scatter", comm)
    return out


def broadcast(original, self, input_, src=0):
    if not _ours(self):
        return original(self, input_, src)
    assert src < self.world_size, f"Invalid src rank ({src})"
    comm = communicator(self)
    comm.broadcast(input_, src)  # group-local src, as SGLang's
    _record("broadcast", comm)
    return input_


# The AROUND hooks the install table registers on GroupCoordinator (scope
# "platform"). Public methods and the private ones SGLang's custom ops call: the public
# ones are taken whole because off CPU they go through those custom ops,
# which on an out-of-tree platform are registered for PrivateUse1 only.
HOOKS = {
    "all_reduce": all_reduce,
    "_all_reduce_in_place": all_reduce_in_place,
    "all_gather": all_gather,
    "all_gather_into_tensor": all_gather_into_tensor,
    "_all_gather_into_tensor": all_gather_into_tensor,
    "reduce_scatter_tensor": reduce_scatter_tensor,
    "_reduce_scatter_tensor": reduce_scatter_tensor,
    "all_gatherv": all_gatherv,
    "reduce_scatterv": reduce_scatterv,
    "broadcast": broadcast,
}
