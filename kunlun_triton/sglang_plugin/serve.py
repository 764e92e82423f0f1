"""``kunlun-triton serve ...``: SGLang's HTTP server on the kunlun platform.

Every argument goes to ``sglang.launch_server`` unchanged; the platform is
selected (``SGLANG_PLATFORM=kunlun``), the target and the dispatch policy are
printed at start, and ``--model-path tiny-llama`` / ``tiny-qwen2`` builds and
serves a tiny random model (no hub access needed).

    kunlun-triton serve --model-path /models/Qwen2-7B --port 30000
    kunlun-triton serve --model-path tiny-llama --host 127.0.0.1 --port 30000
"""

from __future__ import annotations

import os
import sys

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


def banner() -> str:
    from kunlun_triton import current_target, dispatch_report

    from . import SUPPORTED_SGLANG_VERSIONS, dev_mode, sglang_version

    lines = [
        f"kunlun-triton serve: SGLang {sglang_version()} (supported: {', '.join(SUPPORTED_SGLANG_VERSIONS)})",
        f"  platform: kunlun ({'development mode: CPU + Triton interpreter' if dev_mode() else 'device'})",
        f"  target:   {current_target()}",
        f"  backend:  KUNLUN_TRITON_BACKEND={os.environ.get('KUNLUN_TRITON_BACKEND', 'auto')}",
        f"  dispatch report so far (this process): {dispatch_report() or 'no op has run yet'}",
        "  the scheduler's report: kunlun_triton.sglang_plugin.report.engine_dispatch_report(engine)",
    ]
    return "\n".join(lines)


def serve_main(argv=None) -> int:
    """Run ``sglang.launch_server`` with ``argv`` on the kunlun platform."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    from . import activate, check_sglang_version

    check_sglang_version()
    if activate() is None:
        raise SystemExit("kunlun-triton serve: the kunlun platform did not activate")
    argv = _resolve_tiny(argv)

    from sglang.srt.plugins import load_plugins

    load_plugins()
    print(banner(), flush=True)
    from sglang.launch_server import run_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    server_args = prepare_server_args(argv)
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
    return 0


if __name__ == "__main__":
    sys.exit(serve_main())
