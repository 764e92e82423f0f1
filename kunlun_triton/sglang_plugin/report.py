"""Fetch kunlun-triton's dispatch report from SGLang's scheduler processes.

The kernels run in the scheduler (one process per TP rank), not in the
process holding the ``sglang.Engine``. The general plugin gives SGLang's
``Scheduler`` one extra method, called through ``Engine.collective_rpc``: each
rank writes ``{target, pid, tp_rank, ops: dispatch_report()}`` to a JSON file,
which :func:`engine_dispatch_report` reads back.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

RPC_METHOD = "kunlun_triton_dump_dispatch_report"


def _dump_dispatch_report(self, path: str) -> None:
    from kunlun_triton import current_target, dispatch_report

    try:
        from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_rank

        rank = int(get_tensor_model_parallel_rank())
    except Exception:  # no TP group: a single rank
        rank = 0
    data = {"target": current_target().name, "pid": os.getpid(), "tp_rank": rank, "ops": dispatch_report()}
    out = Path(path) / f"rank{rank}.json"
    out.write_text(json.dumps(data, default=str))


def install_scheduler_rpc() -> None:
    from sglang.srt.managers.scheduler import Scheduler

    if getattr(Scheduler, RPC_METHOD, None) is None:
        setattr(Scheduler, RPC_METHOD, _dump_dispatch_report)


def engine_dispatch_report(engine) -> dict:
    """{tp_rank: {"target", "pid", "tp_rank", "ops": {op: {"impl", ...}}}}."""
    with tempfile.TemporaryDirectory(prefix="kt-report-") as tmp:
        engine.collective_rpc(RPC_METHOD, path=tmp)
        reports = {}
        for f in sorted(Path(tmp).glob("rank*.json")):
            data = json.loads(f.read_text())
            reports[data["tp_rank"]] = data
    return reports
