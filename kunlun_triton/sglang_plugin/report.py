"""Fetch kunlun-triton's dispatch report from SGLang's scheduler processes.

The kernels run in the schedulers (one process per TP, PP and DP rank), not
in the process holding the ``sglang.Engine``. ``Engine.collective_rpc(method)``
reaches every rank's ``Scheduler.handle_rpc_request``, which our AROUND hook
answers for the method ``kunlun_triton_dispatch_report`` (and passes every
other method on): each rank writes ``{target, pid, rank, tp_rank, pp_rank,
dp_rank, ops: dispatch_report()}`` to a JSON file, which
:func:`engine_dispatch_report` reads back. The hooks are in the install table (``install.py``).

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
import time
from pathlib import Path

from ..runtime import current_target, dispatch_report
from .linear_attention.gdn import extend_batches_report
from .speculative.accept import accept_report
from .speculative.algorithms import speculative_shape
from .speculative.phases import speculative_report

RPC_METHOD = "kunlun_triton_dispatch_report"
STATE_KEY = "kunlun_triton"


def _dp_rank(scheduler) -> int:
    """The data-parallel rank SGLang's launcher gave this scheduler (0 without a DP controller)."""
    try:
        from sglang.srt.runtime_context import get_parallel  # SGLang 0.5.23

        return int(get_parallel().dp_rank or 0)
    except Exception:  # older releases keep it on the scheduler
        return int(getattr(scheduler, "dp_rank", 0) or 0)


def _place(scheduler) -> dict:
    """Where this scheduler sits: its TP, PP and DP rank, and ``rank``, its index
    among every scheduler of the deployment (TP fastest, then PP, then the
    data-parallel replica; DP attention's ranks are TP ranks of one replica).
    With TP alone ``rank`` is the TP rank."""
    from sglang.srt.distributed import parallel_state

    try:
        tp_rank = int(parallel_state.get_tensor_model_parallel_rank())
        tp_size = int(parallel_state.get_tensor_model_parallel_world_size())
    except Exception:  # no TP group: a single rank
        tp_rank, tp_size = 0, 1
    try:
        pp = parallel_state.get_pp_group()
        pp_rank, pp_size = int(pp.rank_in_group), int(pp.world_size)
    except Exception:  # no PP group: one stage
        pp_rank, pp_size = 0, 1
    dp_rank = _dp_rank(scheduler)
    replica = 0 if getattr(getattr(scheduler, "server_args", None), "enable_dp_attention", False) else dp_rank
    return {"rank": (replica * pp_size + pp_rank) * tp_size + tp_rank, "tp_rank": tp_rank, "pp_rank": pp_rank,
            "dp_rank": dp_rank}  # fmt: skip


def _record(scheduler=None) -> dict:
    phases = speculative_report()
    record = {"target": current_target().name, "pid": os.getpid(), **_place(scheduler), "ops": dispatch_report(),
              "speculative": phases, "gdn_extend_batches": extend_batches_report()}  # fmt: skip
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
        data = _record(self)
        out = Path(recv_req.parameters["path"]) / f"rank{data['rank']}.json"
        partial = out.with_suffix(".part")  # renamed when whole: the reader globs *.json
        partial.write_text(json.dumps(data, default=str))
        partial.rename(out)
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
        state[STATE_KEY] = _record(args[0] if args else None)
    return result


def engine_dispatch_report(engine, wait_s: float = 60.0) -> dict:
    """{rank: {"target", "pid", "rank", "tp_rank", "pp_rank", "dp_rank", "ops": {op: {"impl", ...}},
    "speculative": {phase: ...}, and with speculative decoding "accept": {"accept_length", ...}
    (speculative/accept.py)}}, one entry per scheduler of `engine`.

    Under a data-parallel controller (``--dp-size`` > 1) an RPC reaches no
    scheduler, or one (the replicas connect to ports of their own, DP
    attention's leaders share one), so each DP rank's leader answers through
    its internal state instead: with DP attention every rank, with replicas
    each replica's first rank. Otherwise every rank writes its file; the
    ranks past the first pipeline stage see the RPC a step later than the one
    that answers it, so the files are awaited up to `wait_s`."""
    args = engine.server_args
    if getattr(args, "dp_size", 1) > 1:
        states = engine.get_server_info()["internal_states"]
        return {state[STATE_KEY]["rank"]: state[STATE_KEY] for state in states if STATE_KEY in state}
    expected = args.tp_size * getattr(args, "pp_size", 1)
    with tempfile.TemporaryDirectory(prefix="kt-report-") as tmp:
        engine.collective_rpc(RPC_METHOD, path=tmp)
        deadline = time.monotonic() + wait_s
        while len(list(Path(tmp).glob("rank*.json"))) < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        reports = {}
        for f in sorted(Path(tmp).glob("rank*.json")):
            data = json.loads(f.read_text())
            reports[data["rank"]] = data
    return reports
