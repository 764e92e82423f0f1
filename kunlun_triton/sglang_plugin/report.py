"""Fetch kunlun-triton's dispatch report from SGLang's scheduler processes.

The kernels run in the scheduler (one process per TP rank), not in the
process holding the ``sglang.Engine``. ``Engine.collective_rpc(method)``
reaches every rank's ``Scheduler.handle_rpc_request``, which our AROUND hook
answers for the method ``kunlun_triton_dispatch_report`` (and passes every
other method on): each rank writes ``{target, pid, tp_rank, ops:
dispatch_report()}`` to a JSON file, which :func:`engine_dispatch_report`
reads back. The hooks are in the install table (``install.py``).

An HTTP server has no RPC endpoint, so an AFTER hook on
``Scheduler.get_internal_state`` also adds the same record under
``"kunlun_triton"`` to the scheduler's internal state, which ``GET
/server_info`` returns (``internal_states``: the tp-rank-0 scheduler of each
data-parallel rank). ``kunlun-triton serve`` prints it from there.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..runtime import current_target, dispatch_report
from .speculative.accept import accept_report
from .speculative.algorithms import speculative_shape
from .speculative.phases import speculative_report

RPC_METHOD = "kunlun_triton_dispatch_report"
STATE_KEY = "kunlun_triton"


def _record() -> dict:
    try:
        from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_rank

        rank = int(get_tensor_model_parallel_rank())
    except Exception:  # no TP group: a single rank
        rank = 0
    phases = speculative_report()
    record = {"target": current_target().name, "pid": os.getpid(), "tp_rank": rank, "ops": dispatch_report(),
              "speculative": phases}  # fmt: skip
    algorithm, _, _, num_draft_tokens = speculative_shape()
    if algorithm:  # accept length (speculative/accept.py): SGLang's per-request counters, pooled
        record["accept"] = accept_report(phases.get("target_verify", {}).get("forwards", 0), num_draft_tokens)
    return record


def answer_report_rpc(original, self, recv_req):
    """AROUND hook on ``Scheduler.handle_rpc_request``: our method writes this
    rank's record to ``parameters["path"]``; any other goes to SGLang."""
    if getattr(recv_req, "method", None) != RPC_METHOD:
        return original(self, recv_req)
    from sglang.srt.managers.io_struct import RpcReqOutput
    from torch.distributed import barrier

    try:
        data = _record()
        out = Path(recv_req.parameters["path"]) / f"rank{data['tp_rank']}.json"
        out.write_text(json.dumps(data, default=str))
        success, message = True, ""
    except Exception as exc:  # answered like SGLang's own RPCs: success False and why
        success, message = False, f"{type(exc).__name__}: {exc}"
    barrier(group=self.tp_group.cpu_group)  # as SGLang's handle_rpc_request does
    return RpcReqOutput(success=success, message=message)


def add_report_to_internal_state(result, *args, **kwargs):
    """AFTER hook on ``Scheduler.get_internal_state``; only on our platform
    (the general plugin also runs under others)."""
    from sglang.srt.platforms import current_platform

    state = getattr(result, "internal_state", None)
    if isinstance(state, dict) and type(current_platform).__module__.startswith("kunlun_triton."):
        state[STATE_KEY] = _record()
    return result


def engine_dispatch_report(engine) -> dict:
    """{tp_rank: {"target", "pid", "tp_rank", "ops": {op: {"impl", ...}}, "speculative": {phase: ...},
    and with speculative decoding "accept": {"accept_length", ...} (speculative/accept.py)}}."""
    with tempfile.TemporaryDirectory(prefix="kt-report-") as tmp:
        engine.collective_rpc(RPC_METHOD, path=tmp)
        reports = {}
        for f in sorted(Path(tmp).glob("rank*.json")):
            data = json.loads(f.read_text())
            reports[data["tp_rank"]] = data
    return reports
