"""``kunlun-triton serve ...``: SGLang's HTTP server on the kunlun platform.

Every argument goes to ``sglang.launch_server`` unchanged; the platform is
selected (``SGLANG_PLATFORM=kunlun``) and ``--model-path tiny-llama`` /
``tiny-qwen2`` builds and serves a tiny random model (no hub access needed).

At start it prints the routing plan, one line per touchpoint of the install
table (``install.py``): what it routes to which of our ops, and whether the
arguments use it (attention and sampling backend, collectives). The dispatch report of this process would be empty (the
kernels run in the scheduler processes), so once the server has run a request
(SGLang's warmup is one) it prints the tp-rank-0 scheduler's real report,
fetched from ``GET /server_info`` (``internal_states[*]["kunlun_triton"]``,
added by our hook on ``Scheduler.get_internal_state``, see report.py).

    kunlun-triton serve --model-path /models/Qwen2-7B --port 30000
    kunlun-triton serve --model-path tiny-llama --host 127.0.0.1 --port 30000
"""

from __future__ import annotations

import os
import sys

from ...runtime import capabilities, current_target, env_str
from ...runtime.dispatch import forced_backend
from ..install import TOUCHPOINTS
from ..platform.activation import activate, check_sglang_version, register, sglang_version
from ..platform.mode import dev_mode
from ..platform.names import ATTENTION_BACKEND, SAMPLING_BACKEND
from ..platform.versions import SUPPORTED_SGLANG_VERSIONS

TINY = {"tiny-llama": "llama", "tiny-qwen2": "qwen2"}


def _resolve_tiny(argv: list[str]) -> list[str]:
    argv = list(argv)
    for i, arg in enumerate(argv):
        value = None
        if arg == "--model-path" and i + 1 < len(argv):
            value, at = argv[i + 1], i + 1
        elif arg.startswith("--model-path="):
            value, at = arg.split("=", 1)[1], None
        if value in TINY:
            from .tiny_model import build_tiny_model, default_model_dir

            path = str(build_tiny_model(default_model_dir(TINY[value]), TINY[value]))
            if at is None:
                argv[i] = f"--model-path={path}"
            else:
                argv[at] = path
            if "--dtype" not in argv and not any(a.startswith("--dtype=") for a in argv):
                argv += ["--dtype", "float32"]
    return argv


def _kernels_or_references() -> str:
    target = current_target()
    if forced_backend() == "torch":
        return "torch references (KUNLUN_TRITON_BACKEND=torch)"
    return "Triton kernels" if target.is_triton else f"torch references ({target.reason})"


def _route(flag: str, chosen, ours: str, routes: str) -> str:
    if chosen in (None, ours):
        how = "platform default" if chosen is None else f"--{flag}"
        return f"{ours} ({how}): {routes}"
    return f"{chosen} (--{flag}): SGLang's own, not ours"


def _status(point, server_args) -> str:
    """What a touchpoint does for these arguments."""
    if point.name == "attention backend":
        return _route("attention-backend", server_args.attention_backend, ATTENTION_BACKEND, point.routes)
    if point.name == "sampling backend":
        return _route("sampling-backend", server_args.sampling_backend, SAMPLING_BACKEND, point.routes)
    if point.name == "collectives":
        tp = int(getattr(server_args, "tp_size", 1) or 1)
        return f"{point.routes}: on (tp_size {tp})" if tp > 1 else "off (tp_size 1)"
    return point.routes


def plan(server_args) -> str:
    """What the server will run, from the install table and the arguments:
    the launching process runs no op itself (the schedulers do), so its
    dispatch report is empty."""
    lines = [
        f"kunlun-triton serve: SGLang {sglang_version()} (supported: {', '.join(SUPPORTED_SGLANG_VERSIONS)})",
        f"  platform:    kunlun ({'development mode: CPU + Triton interpreter' if dev_mode() else 'device'})",
        f"  target:      {current_target()}",
        f"  our ops run: {_kernels_or_references()}"
        f" (KUNLUN_TRITON_BACKEND={env_str('KUNLUN_TRITON_BACKEND', 'auto')})",
        "  routing plan (the install table; the schedulers' report follows once the server is up):",
    ]
    width = max(len(p.name) for p in TOUCHPOINTS)
    lines += [f"    {p.name:<{width}}  [{p.kind}] {p.sglang} -> {_status(p, server_args)}" for p in TOUCHPOINTS]
    if not capabilities().bf16_complete:
        lines.append("    dtype: bf16 is incomplete on this target: a bf16 model runs in float16")
    return "\n".join(lines)


def format_report(rep: dict) -> str:
    """A scheduler's report as a short table: op, implementation, calls per
    implementation (and why, for an op that did not run on Triton)."""
    lines = [f"kunlun-triton: scheduler dispatch report (tp rank {rep.get('tp_rank', 0)}, "
             f"pid {rep.get('pid')}, target {rep.get('target')}):"]  # fmt: skip
    ops = sorted((rep.get("ops") or {}).items())
    width = max([len("op")] + [len(op) for op, _ in ops])
    lines.append(f"    {'op':{width}s}  {'implementation':14s}  calls")
    for op, e in ops:
        calls = ", ".join(f"{k} {v}" for k, v in sorted(e.get("calls", {}).items()))
        why = f"  ({e.get('reason')})" if e.get("impl") != "triton" and e.get("reason") else ""
        lines.append(f"    {op:{width}s}  {str(e.get('impl')):14s}  {calls}{why}")
    for phase, e in sorted((rep.get("speculative") or {}).items()):  # speculative.py: what each phase ran
        ops = ", ".join(f"{k}={v}" for k, v in sorted(e.get("ops", {}).items()))
        lines.append(f"    speculative {phase}: {e.get('forwards')} forwards, {e.get('requests')} rows  [{ops}]")
    accept = rep.get("accept")  # spec_accept.py: SGLang's per-request counters, finished requests
    if accept and accept.get("accept_length") is not None:
        per_forward = accept.get("tokens_per_target_forward")
        lines.append(f"    speculative accept length {accept['accept_length']:.2f} tokens per verify step "
                     f"({accept['completion_tokens']} tokens, {accept['verify_steps']} verify steps, "
                     f"{accept['requests']} requests); "
                     + (f"{per_forward:.2f} tokens per target forward" if per_forward is not None else ""))
    return "\n".join(lines)


def fetch_scheduler_report(base_url: str, api_key=None, timeout_s: float = 30) -> dict | None:
    """The tp-rank-0 scheduler's report from ``GET /server_info`` (the
    ``kunlun_triton`` entry our hook adds to its internal state), or None."""
    import json
    import urllib.request

    req = urllib.request.Request(f"{base_url}/server_info")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        info = json.load(r)
    for state in info.get("internal_states") or []:
        if isinstance(state, dict) and state.get("kunlun_triton"):
            return state["kunlun_triton"]
    return None


def _print_report_when_up(server_args, poll_s: float = 5.0, give_up_s: float = 3600.0) -> None:
    """Daemon thread: once a request has run (SGLang's own warmup is one),
    print the scheduler's real dispatch report, once."""
    import time

    host = server_args.host if server_args.host not in ("0.0.0.0", "::", "", None) else "127.0.0.1"
    base = f"http://{host}:{server_args.port}"
    deadline = time.time() + give_up_s
    while time.time() < deadline:
        try:
            rep = fetch_scheduler_report(base, getattr(server_args, "api_key", None))
        except (OSError, ValueError):
            rep = None  # not listening yet
        if rep is not None and rep.get("ops"):
            print(format_report(rep), flush=True)
            return
        time.sleep(poll_s)


def _missing_local_model(argv) -> str | None:
    """The --model-path that names a local path (absolute, ./, ../, ~) which
    does not exist; SGLang would take it for a hub repo id and fail with a
    "Repo id must be in the form" traceback."""
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--model-path" and i + 1 < len(argv) else \
            arg.partition("=")[2] if arg.startswith("--model-path=") else None  # fmt: skip
        if value and value.startswith(("/", "./", "../", "~")) and not os.path.exists(os.path.expanduser(value)):
            return value
    return None


def serve_main(argv=None) -> int:
    """Run ``sglang.launch_server`` with ``argv`` on the kunlun platform."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
    missing = _missing_local_model(argv)
    if missing:
        print(f"kunlun-triton serve: error: --model-path {missing}: no such file or directory", file=sys.stderr)
        return 2
    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    check_sglang_version()
    if activate() is None:
        raise SystemExit("kunlun-triton serve: the kunlun platform did not activate")
    argv = _resolve_tiny(argv)

    from sglang.srt.plugins import load_plugins

    load_plugins()
    register()  # SGLang skips it with SGLANG_PLATFORM set (we have two platform names); idempotent
    import threading

    from sglang.launch_server import run_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    server_args = prepare_server_args(argv)
    print(plan(server_args), flush=True)
    threading.Thread(target=_print_report_when_up, args=(server_args,), daemon=True).start()
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
    return 0


if __name__ == "__main__":
    sys.exit(serve_main())
