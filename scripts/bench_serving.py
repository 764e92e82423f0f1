#!/usr/bin/env python
"""Serving speed: our platform against SGLang's own Triton attention backend.

Runs ``python -m sglang.bench_serving --backend sglang`` (random prompts) twice
on the same model and load, each against a fresh ``sglang.launch_server`` on
127.0.0.1:

  ours    SGLANG_PLATFORM=kunlun (KUNLUN_TRITON_TARGET=cuda when torch sees a
          GPU), ``--attention-backend kunlun_triton``;
  theirs  plain SGLang (our plugins filtered out), ``--attention-backend triton``;

then prints output/request throughput and median TTFT/ITL side by side with
the ratio ours/theirs, and writes a JSON summary (``--output``). The prompts
are random token ids (``--dataset-name random-ids``: works offline, the
tokenizer comes from the model directory); ``--dataset-name random
--dataset-path sharegpt.json`` uses SGLang's ShareGPT-based random prompts.

Without a GPU the baseline cannot run (SGLang's in-tree CPU path needs a CPU
build of sgl_kernel): only ours runs, in development mode (CPU + Triton
interpreter; slow, a smoke test), as with ``--ours-only``.

    python scripts/bench_serving.py --model-path /models/Qwen2-7B-Instruct \\
        --num-prompts 200 --random-input-len 1024 --random-output-len 256
    python scripts/bench_serving.py --num-prompts 2 --random-input-len 8 \\
        --random-output-len 4 --ours-only       # tiny model, CPU
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

PLAIN_PLUGINS = "__kunlun_triton_excluded__"  # SGLANG_PLUGINS whitelist naming no plugin
METRICS = [("output_throughput", "output throughput (tok/s)", "{:.2f}"),
           ("request_throughput", "request throughput (req/s)", "{:.3f}"),
           ("median_ttft_ms", "median TTFT (ms)", "{:.1f}"),
           ("median_itl_ms", "median ITL (ms)", "{:.2f}"),
           ("completed", "completed requests", "{:d}")]  # fmt: skip
RESULT_KEYS = ("completed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
               "input_throughput", "output_throughput", "median_ttft_ms", "median_itl_ms", "median_tpot_ms",
               "median_e2e_latency_ms")  # fmt: skip
SERVER_KEYS = ("attention_backend", "sampling_backend", "dtype", "disable_cuda_graph", "page_size", "device", "version")
_children: list[subprocess.Popen] = []


def log(msg: str) -> None:
    print(f"[bench_serving] {msg}", flush=True)


def gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001  (no torch, broken driver: no GPU)
        return None


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def spawn(cmd: list[str], env: dict, log_path: str, cwd: str) -> subprocess.Popen:
    """A child in its own process group (so the whole tree can be killed),
    output to a file (nobody drains a pipe while it serves)."""
    with open(log_path, "w") as f:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    _children.append(proc)
    return proc


def _group_gone(proc: subprocess.Popen, wait_s: float, leader_only: bool) -> bool:
    deadline = time.time() + wait_s
    while time.time() < deadline:
        leader_done = proc.poll() is not None  # (reaps it)
        try:
            os.killpg(proc.pid, 0)  # anyone left in the group (schedulers, detokenizer)?
        except ProcessLookupError:
            return True
        if leader_done and leader_only:
            return False  # the leader is gone: what is left of its group gets the group signals now
        time.sleep(0.5)
    return False


def kill_tree(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM the leader (SGLang's server drains and stops its children), then
    SIGTERM, then SIGKILL its whole process group, each wait bounded."""
    steps = ((os.kill, signal.SIGTERM, grace_s), (os.killpg, signal.SIGTERM, 5), (os.killpg, signal.SIGKILL, 10))
    for send, sig, wait_s in steps:
        try:
            send(proc.pid, sig)
        except ProcessLookupError:
            pass
        if _group_gone(proc, wait_s, leader_only=send is os.kill):
            break
    if proc in _children:
        _children.remove(proc)


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that kill the servers


def tail(path: str, n: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def get_json(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def wait_healthy(proc, base: str, log_path: str, timeout_s: float, name: str) -> None:
    start = time.time()
    last_said = start
    while time.time() - start < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} server exited with {proc.returncode}:\n{tail(log_path)}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                if r.status == 200:
                    log(f"{name} server healthy after {time.time() - start:.0f} s")
                    return
        except OSError:
            pass
        if time.time() - last_said >= 15:
            last_said = time.time()
            log(f"waiting for the {name} server: {last_said - start:.0f}/{timeout_s:.0f} s (log {log_path})")
        time.sleep(2)
    raise RuntimeError(f"{name} server not healthy after {timeout_s:.0f} s:\n{tail(log_path)}")


def run_side(name: str, args, port: int, workdir: str, gpu: bool) -> dict:
    env = dict(os.environ, SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0")
    server = [sys.executable, "-m", "sglang.launch_server", "--model-path", args.model_path,
              "--host", "127.0.0.1", "--port", str(port), "--random-seed", "0", "--log-level", "warning"]  # fmt: skip
    if args.dtype:
        server += ["--dtype", args.dtype]
    server += shlex.split(args.server_args)
    if name == "ours":
        env["SGLANG_PLATFORM"] = "kunlun"
        if gpu:
            env.setdefault("KUNLUN_TRITON_TARGET", "cuda")
        server += ["--attention-backend", "kunlun_triton"] + shlex.split(args.ours_args)
    else:
        env.pop("SGLANG_PLATFORM", None)
        env.pop("KUNLUN_TRITON_TARGET", None)
        env["SGLANG_PLUGINS"] = PLAIN_PLUGINS  # plain SGLang: none of our plugins loaded
        server += ["--attention-backend", "triton"] + shlex.split(args.theirs_args)
    if not port_free(port):
        raise RuntimeError(f"port {port} on 127.0.0.1 is in use: pick another --port")
    base = f"http://127.0.0.1:{port}"
    server_log, bench_log = (os.path.join(workdir, f"{name}_{k}.log") for k in ("server", "bench"))
    result_file = os.path.join(workdir, f"{name}.jsonl")
    log(f"{name}: starting {' '.join(server)}")
    proc = spawn(server, env, server_log, workdir)
    try:
        wait_healthy(proc, base, server_log, args.start_timeout, name)
        bench = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1",
                 "--port", str(port), "--dataset-name", args.dataset_name, "--num-prompts", str(args.num_prompts),
                 "--random-input-len", str(args.random_input_len), "--random-output-len", str(args.random_output_len),
                 "--random-range-ratio", str(args.random_range_ratio), "--request-rate", str(args.request_rate),
                 "--seed", str(args.seed), "--warmup-requests", str(args.warmup_requests),
                 "--ready-check-timeout-sec", "60", "--disable-tqdm", "--output-file", result_file]  # fmt: skip
        if args.dataset_path:
            bench += ["--dataset-path", args.dataset_path]
        if args.max_concurrency:
            bench += ["--max-concurrency", str(args.max_concurrency)]
        log(f"{name}: {' '.join(bench)}")
        bproc = spawn(bench, {k: v for k, v in env.items() if k != "SGLANG_PLATFORM"}, bench_log, workdir)
        try:
            rc = bproc.wait(timeout=args.bench_timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{name}: bench_serving ran past {args.bench_timeout} s:\n{tail(bench_log)}") from None
        finally:
            kill_tree(bproc, grace_s=5)
        if rc != 0 or not os.path.exists(result_file):
            raise RuntimeError(f"{name}: bench_serving failed (rc {rc}):\n{tail(bench_log)}")
        with open(result_file) as f:
            result = json.loads(f.read().strip().splitlines()[-1])
        out = {k: result.get(k) for k in RESULT_KEYS}
        out.update(port=port, server_log=server_log, bench_log=bench_log, result_file=result_file)
        try:
            info = get_json(f"{base}/server_info", timeout=30)
            out["server"] = {k: info.get(k) for k in SERVER_KEYS}
            states = [s for s in info.get("internal_states") or [] if isinstance(s, dict)]
            rep = next((s["kunlun_triton"] for s in states if s.get("kunlun_triton")), None)
            if rep:  # our scheduler's dispatch report: which impl each op ran on
                out["dispatch"] = {"target": rep.get("target"),
                                   "ops": {op: e.get("impl") for op, e in (rep.get("ops") or {}).items()}}  # fmt: skip
        except (OSError, ValueError) as e:
            out["server"] = {"error": f"/server_info: {e}"}
        return out
    finally:
        log(f"{name}: stopping the server")
        kill_tree(proc)


def table(ours: dict, theirs: dict | None) -> str:
    rows = [f"{'':28s} {'ours (kunlun)':>15s} {'SGLang triton':>15s} {'ours/theirs':>12s}"]
    for key, label, fmt in METRICS:
        a, b = ours.get(key), (theirs or {}).get(key)
        ratio = f"{a / b:.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"
        rows.append(f"{label:28s} {fmt.format(a) if a is not None else '-':>15s} "
                    f"{fmt.format(b) if b is not None else '-':>15s} {ratio:>12s}")  # fmt: skip
    for key, label in (("attention_backend", "attention backend"), ("disable_cuda_graph", "cuda graph disabled")):
        a, b = ((side or {}).get("server", {}).get(key, "-") for side in (ours, theirs))
        rows.append(f"{label:28s} {str(a):>15s} {str(b if theirs else '-'):>15s}")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, typ, default, helptext in (
        ("--model-path", str, None, "a local checkpoint; default: build the tiny Llama"),
        ("--num-prompts", int, 100, None), ("--random-input-len", int, 512, None),
        ("--random-output-len", int, 128, None),
        ("--random-range-ratio", float, 1.0, "1.0: every request has exactly the lengths"),
        ("--request-rate", float, float("inf"), None), ("--max-concurrency", int, None, None),
        ("--dataset-path", str, "", "ShareGPT json for --dataset-name random (offline)"),
        ("--seed", int, 1, None), ("--warmup-requests", int, 1, None),
        ("--port", int, 31000, "ours on PORT, theirs on PORT+1 (127.0.0.1)"),
        ("--dtype", str, None, "both servers (default: the model's; float32 for the tiny model)"),
        ("--server-args", str, "", "extra launch_server arguments for both servers"),
        ("--ours-args", str, "", "extra launch_server arguments for ours only"),
        ("--theirs-args", str, "", "extra launch_server arguments for SGLang's only "
         "(a single flag needs '=': --theirs-args=--disable-cuda-graph)"),
        ("--start-timeout", float, 900, "seconds to wait for each server's /health"),
        ("--bench-timeout", float, 3600, "seconds for each bench_serving run"),
        ("--workdir", str, None, "logs and raw results (default: a new temp dir)"),
        ("--output", str, "bench_serving_summary.json", "the JSON summary"),
    ):  # fmt: skip
        p.add_argument(flag, type=typ, default=default, help=helptext)
    p.add_argument("--dataset-name", default="random-ids", choices=["random-ids", "random"])
    p.add_argument("--ours-only", action="store_true", help="skip the baseline (automatic without a GPU)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)

    gpu = gpu_name()
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="kt_bench_serving_"))
    os.makedirs(workdir, exist_ok=True)
    if args.model_path is None:
        from kunlun_triton.sglang_plugin.tools.tiny_model import build_tiny_model

        args.model_path = str(build_tiny_model(os.path.join(workdir, "tiny-llama"), "llama"))
        args.dtype = args.dtype or "float32"
        if not gpu:  # keep the CPU smoke run small
            args.server_args = "--max-total-tokens 2048 --max-running-requests 8 " + args.server_args
    args.model_path = os.path.abspath(args.model_path) if os.path.exists(args.model_path) else args.model_path
    ours_only = args.ours_only
    if not gpu and not ours_only:
        log("no GPU: the baseline (plain SGLang, Triton attention) needs a GPU (SGLang's in-tree CPU path needs "
            "a CPU build of sgl_kernel); running only ours, in development mode (CPU + Triton interpreter)")
        ours_only = True
    log(f"device: {gpu or 'cpu (development mode)'}; model {args.model_path}; workdir {workdir}")

    summary = {"device": gpu or "cpu", "model_path": args.model_path,
               "load": {k: getattr(args, k) for k in ("dataset_name", "num_prompts", "random_input_len",
                                                      "random_output_len", "random_range_ratio", "request_rate",
                                                      "max_concurrency", "seed")}}  # fmt: skip
    summary["load"]["request_rate"] = str(args.request_rate)  # inf is not JSON
    try:
        summary["ours"] = run_side("ours", args, args.port, workdir, bool(gpu))
        summary["theirs"] = None if ours_only else run_side("theirs", args, args.port + 1, workdir, bool(gpu))
    except (RuntimeError, KeyboardInterrupt) as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        for proc in list(_children):
            kill_tree(proc)
    ours, theirs = summary["ours"], summary["theirs"]
    if theirs is None:
        summary["baseline_skipped"] = "--ours-only" if args.ours_only else "no GPU: the baseline needs a GPU"
    ratio = (ours["output_throughput"] / theirs["output_throughput"]
             if theirs and theirs.get("output_throughput") else None)  # fmt: skip
    summary["ratio_output_throughput"] = ratio
    summary["meets_baseline"] = None if ratio is None else ratio >= 1.0
    print(table(ours, theirs))
    if "dispatch" in ours:
        print("ours ran: " + ", ".join(f"{op}={impl}" for op, impl in sorted(ours["dispatch"]["ops"].items())))
    if ratio is None:
        print(f"baseline not run ({summary['baseline_skipped']}): no verdict")
    else:
        print(f"{'PASS' if ratio >= 1.0 else 'FAIL'}: ours/theirs output throughput {ratio:.3f}")
    with open(args.output, "w") as f:
        json.dump(summary, f, indent=2)
    log(f"summary: {os.path.abspath(args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
