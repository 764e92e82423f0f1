"""`kunlun-triton` command line: doctor, bench, tune, convert-weights, serve."""

from __future__ import annotations

import argparse
import os
import sys


def _enable_interpreter_on_cpu() -> None:
    """On a machine with no accelerator, run kernels in the Triton interpreter.

    Triton reads TRITON_INTERPRET when a kernel is decorated, so this must run
    before any kernel module is imported. Only the CLI does this; a library
    import never changes the environment.
    """
    if "TRITON_INTERPRET" in os.environ or os.environ.get("KUNLUN_TRITON_TARGET"):
        return
    from .runtime.target import _kunlun_present

    import torch

    if not torch.cuda.is_available() and not _kunlun_present():
        os.environ["TRITON_INTERPRET"] = "1"
        print("no accelerator found: running kernels in the Triton interpreter (TRITON_INTERPRET=1)", file=sys.stderr)


def _cmd_doctor(args) -> int:
    from .tools.doctor import doctor

    return doctor(args.family or None, repeat=args.repeat, verbose=args.verbose)


def _cmd_bench(args) -> int:
    from .tools.bench import collect_cases, format_table, print_progress, run_bench

    cases = collect_cases(args.family, args.preset, args)
    rows = run_bench(cases, warmup=args.warmup, repeat=args.repeat, peak_gbps=args.peak_gbps, progress=print_progress)
    print(file=sys.stderr)
    print(format_table(rows))
    return 0


def _delegate(module: str, function: str):
    def run(args) -> int:
        import importlib

        return importlib.import_module(module).__getattribute__(function)(args.rest)

    return run


def build_parser() -> argparse.ArgumentParser:
    from .tools.presets import DEFAULT_PRESET, MODEL_PRESETS

    parser = argparse.ArgumentParser(prog="kunlun-triton", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("doctor", help="detected target, and every op checked against its reference")
    p.add_argument("family", nargs="*", help="op families to check (default: all)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(run=_cmd_doctor)

    p = sub.add_parser("bench", help="time ops side by side with their references")
    p.add_argument("family", nargs="*", help="op families (default: all)")
    p.add_argument("--preset", choices=sorted(MODEL_PRESETS), default=DEFAULT_PRESET)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--peak-gbps", type=float, default=None, help="device peak bandwidth, if not in the table")
    p.add_argument("--quick", action="store_true", help="small shapes only (CPU, CI)")
    p.set_defaults(run=_cmd_bench)

    for name, module, function, text in (
        ("tune", "kunlun_triton.tools.tune", "main", "search launch configs and write autotune_configs/"),
        ("convert-weights", "kunlun_triton.tools.convert_weights", "main", "convert a safetensors checkpoint to fp16"),
        ("serve", "kunlun_triton.sglang_plugin.serve", "serve_main", "sglang.launch_server on the kunlun platform"),
    ):
        p = sub.add_parser(name, help=text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(run=_delegate(module, function))
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("doctor", "bench", "tune"):
        _enable_interpreter_on_cpu()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
