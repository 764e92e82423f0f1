"""Fetch kunlun-triton's dispatch report from SGLang's scheduler processes.

The kernels run in the scheduler (one process per TP rank), not in the
process holding the ``sglang.Engine``. The general plugin gives SGLang's
``Scheduler`` one extra method, called through ``Engine.collective_rpc``: each
rank writes ``{target, pid, tp_rank, ops: dispatch_report()}`` to a JSON file,
which :func:`engine_dispatch_report` reads back.

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

RPC_METHOD = "kunlun_triton_dump_dispatch_report"


INTERNAL_STATE_TARGET = "sglang.srt.managers.scheduler.Scheduler.get_internal_state"
STATE_KEY = "kunlun_triton"


def _record() -> dict:
    from kunlun_triton import current_target, dispatch_report

    try:
        from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_rank

        rank = int(get_tensor_model_parallel_rank())
    except Exception:  # no TP group: a single rank
        rank = 0
    return {"target": current_target().name, "pid": os.getpid(), "tp_rank": rank, "ops": dispatch_report()}


def _dump_dispatch_report(self, path: str) -> None:
    data = _record()
    out = Path(path) / f"rank{data['tp_rank']}.json"
    out.write_text(json.dumps(data, default=str))


def add_report_to_internal_state(result, *args, **kwargs):
    """AFTER hook on ``Scheduler.get_internal_state``; only on our platform
    (the general plugin also runs under others)."""
    from sglang.srt.platforms import current_platform

    state = getattr(result, "internal_state", None)
    if isinstance(state, dict) and type(current_platform).__module__.startswith("kunlun_triton."):
        state[STATE_KEY] = _record()
    return result


def install_scheduler_rpc() -> None:
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if getattr(Scheduler, RPC_METHOD, None) is None:
        setattr(Scheduler, RPC_METHOD, _dump_dispatch_report)
    hooks = HookRegistry._hooks.get(INTERNAL_STATE_TARGET, [])
    if not any(h is add_report_to_internal_state for _, h, _ in hooks):
        HookRegistry.register(INTERNAL_STATE_TARGET, add_report_to_internal_state, HookType.AFTER)
        HookRegistry.apply_hooks()


def engine_dispatch_report(engine) -> dict:
    """{tp_rank: {"target", "pid", "tp_rank", "ops": {op: {"impl", ...}}}}."""
    with tempfile.TemporaryDirectory(prefix="kt-report-") as tmp:
        engine.collective_rpc(RPC_METHOD, path=tmp)
        reports = {}
        for f in sorted(Path(tmp).glob("rank*.json")):
            data = json.loads(f.read_text())
            reports[data["tp_rank"]] = data
    return reports
