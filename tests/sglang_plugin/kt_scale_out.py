"""Helpers of the scale-out engine tests (expert parallelism, DP attention):
greedy tokens against HF one by one, batched and on radix-cache second
turns, and every rank's dispatch report (imported by name: tests/ is not a package)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from kt_sglang_support import output_ids

NEW = 4
CHUNK = 16
COMM = "kunlun_triton.comm"


def greedy(n=NEW):
    return {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}


def prompts(hf):
    prefix = hf.encode("The radix cache shares the prefix of prompts that begin with")
    long = hf.encode("Once upon a time there was a little model that learned to count: one two three four five six. "
                     "Attention reads keys and values from a paged cache; each page holds a few tokens.")  # fmt: skip
    assert len(long) > 2 * CHUNK
    return prefix, [prefix + hf.encode(" the same tokens."), prefix + hf.encode(" a kernel"), long]


def expectations(hf):
    """(prefix, prompts, HF's greedy tokens), computed before the engine starts:
    an engine's idle ranks poll and starve the oracle's threads on 2 cores."""
    prefix, asked = prompts(hf)
    return prefix, asked, [hf.greedy(p, NEW) for p in asked]


def serve_and_compare(engine, prefix, asked, expected):
    """One by one (with DP attention the other rank idles), batched (ranks of
    different batch sizes), then radix-cache second turns: all equal HF."""
    alone = [output_ids(engine.generate(input_ids=p, sampling_params=greedy())) for p in asked[:2]]
    assert alone == expected[:2], "one by one"
    batched = engine.generate(input_ids=asked, sampling_params=greedy())
    assert [output_ids(o) for o in batched] == expected, "batched"
    again = engine.generate(input_ids=asked[:2], sampling_params=greedy())  # radix-cache hits
    assert [output_ids(o) for o in again] == expected[:2], "radix second turn"
    assert sum(o["meta_info"].get("cached_tokens", 0) for o in again) >= 2 * len(prefix)


def compare_served(result, prefix, expected):
    """`serve_and_compare` for the record of an engine run by `serve_in_process`."""
    assert result["alone"] == expected[:2], "one by one"
    assert result["batched"] == expected, "batched"
    assert result["again"] == expected[:2], "radix second turn"
    assert sum(result["cached_tokens"]) >= 2 * len(prefix), result["cached_tokens"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # the engine's schedulers and controllers with it
    proc.wait()


def serve_in_process(model, options, asked, *, nodes=1, timeout=900):
    """Run kt_parallel_serve.py on `model` with `options` (node 0), plus nodes
    1.. as processes of their own on loopback (``--nnodes``, ``--node-rank``,
    ``--dist-init-addr 127.0.0.1:PORT``, each node its own ``--port``); its
    record: tokens one by one, batched, second turns, every rank's report. A
    hung or failed engine fails the test with the end of its log."""
    import kt_engines

    kt_engines.close()  # no engine of this process left polling the cores
    here = Path(__file__).resolve().parent
    paths = [str(here), str(here.parents[1]), os.environ.get("PYTHONPATH")]  # kt_*, this checkout's package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    with tempfile.TemporaryDirectory(prefix="kt-serve-") as tmp:
        prompts = Path(tmp) / "prompts.json"
        prompts.write_text(json.dumps(asked))
        logs = [Path(tmp) / f"node{rank}.log" for rank in range(nodes)]
        if nodes > 1:
            options = {**options, "nnodes": nodes, "dist_init_addr": f"127.0.0.1:{_free_port()}"}

        def start(rank):
            node = {**options, "node_rank": rank, "port": _free_port()} if nodes > 1 else options
            cmd = [sys.executable, str(here / "kt_parallel_serve.py"), str(model), json.dumps(node), str(prompts)]
            with open(logs[rank], "w") as log:
                return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if rank == 0 else log, stderr=log,
                                        text=True, start_new_session=True)  # fmt: skip

        procs = [start(rank) for rank in range(nodes - 1, -1, -1)][::-1]
        try:
            out, _ = procs[0].communicate(timeout=timeout)
            failed = procs[0].returncode != 0 and f"exited with {procs[0].returncode}"
        except subprocess.TimeoutExpired:
            out, failed = "", f"did not finish in {timeout} s"
        finally:
            for proc in procs:
                _stop(proc)
        if failed:
            tails = "\n".join(f"--- node {r} ---\n" + log.read_text()[-3000:] for r, log in enumerate(logs))
            raise AssertionError(f"the engine ({options}) {failed}; its log ends:\n{tails}")
    return json.loads(out.strip().splitlines()[-1])


def check_reports(engine, ranks, ops, collectives=("all_reduce",), moe=True):
    """Every rank (a process of its own) ran `ops` on Triton and `collectives`
    through our communicator; `engine` is an engine or the reports of one."""
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    reports = engine if isinstance(engine, dict) else engine_dispatch_report(engine)
    reports = {int(rank): rep for rank, rep in reports.items()}
    assert sorted(reports) == list(range(ranks)), sorted(reports)
    assert len({rep["pid"] for rep in reports.values()}) == ranks
    for rank, rep in reports.items():
        seen = rep["ops"]
        for name in ops:
            assert set(seen.get(name, {}).get("calls", {})) == {"triton"}, (rank, name, seen.get(name))
        for name in collectives:
            assert set(seen.get(name, {}).get("calls", {})) == {COMM}, (rank, name, seen.get(name))
        if moe:
            assert seen["moe_topk"]["calls"]["triton"] == seen["fused_experts"]["calls"]["triton"] > 0
    return reports
