"""`kunlun-triton` command line: doctor, bench, tune, inspect, convert-weights, models, regress, serve, scale-out."""

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
    from .runtime.env import env_is_set, env_str

    if env_is_set("TRITON_INTERPRET") or env_str("KUNLUN_TRITON_TARGET"):
        return
    from .runtime.target import _kunlun_present

    import torch

    if not torch.cuda.is_available() and not _kunlun_present():
        os.environ["TRITON_INTERPRET"] = "1"
        print("no accelerator found: running kernels in the Triton interpreter (TRITON_INTERPRET=1)", file=sys.stderr)


def _cmd_doctor(args) -> int:
    from .tools.arguments import environment_problem
    from .tools.doctor import doctor

    problem = environment_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        return doctor(args.family or None, repeat=args.repeat, verbose=args.verbose)
    except ValueError as exc:  # an unknown family or op
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _cmd_bench(args) -> int:
    from .tools.bench import main_from_args

    return main_from_args(args)


def _delegate(module: str, function: str):
    def run(args) -> int:
        import importlib

        return importlib.import_module(module).__getattribute__(function)(args.rest)

    return run


def build_parser() -> argparse.ArgumentParser:
    from .tools.arguments import non_negative_int, positive_float, positive_int
    from .tools.presets import DEFAULT_PRESET, MODEL_PRESETS

    parser = argparse.ArgumentParser(prog="kunlun-triton", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("doctor", help="detected target, and every op checked against its reference")
    p.add_argument("family", nargs="*", help="op families or op names to check (default: all)")
    p.add_argument("--repeat", type=positive_int, default=3)
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(run=_cmd_doctor)

    p = sub.add_parser("bench", help="time ops side by side with their references; `bench speculative --help`: "
                                     "accept length and throughput with vs without speculative decoding")
    p.add_argument("family", nargs="*", help="op families or op names (default: all families)")
    p.add_argument("--preset", choices=sorted(MODEL_PRESETS), default=DEFAULT_PRESET)
    # None: not given (bench.main_from_args fills 3 and 10 in, and tells a mode that ignores them)
    p.add_argument("--warmup", type=non_negative_int, default=None, help="untimed runs per impl (default 3)")
    p.add_argument("--repeat", type=positive_int, default=None, help="timed runs per impl, median kept (default 10)")
    p.add_argument("--peak-gbps", type=positive_float, default=None, help="device peak bandwidth, if not in the table")
    p.add_argument("--quick", action="store_true", help="small shapes only (CPU, CI)")
    p.add_argument(
        "--shape", action="append", metavar="KEY=V[,V...]",
        help="override a preset field or a swept param, e.g. batch=1,8,context_len=512 (repeatable)",
    )
    p.add_argument("--output", "-o", metavar="DIR", help="write results.json, results.csv and plot.png here")
    p.add_argument("--metric", choices=("auto", "time", "gbps"), default=None, help="what the plot shows (auto)")
    p.add_argument("--list", action="store_true", help="list the cases without running them")
    p.add_argument("--peak-table", action="store_true", help="print the known peak bandwidths and exit")
    p.set_defaults(run=_cmd_bench)

    for name, module, function, text in (
        ("tune", "kunlun_triton.tools.tune", "main", "search launch configs and write autotune_configs/"),
        ("inspect", "kunlun_triton.tools.inspect_kernels", "main",
         "registers, spills, SASS per loop of an op's kernels on a target, ahead of time (vs SGLang's)"),
        ("convert-weights", "kunlun_triton.tools.convert_weights", "main",
         "convert a safetensors checkpoint to fp16 (or a GGUF file to a safetensors checkpoint)"),
        ("models", "kunlun_triton.tools.models", "main", "fetch a known real model (smollm2) and print its path"),
        ("regress", "kunlun_triton.sglang_plugin.tools.regress", "main",
         "record a model's greedy outputs and top-5 logprobs as a golden file, or compare with one"),
        ("serve", "kunlun_triton.sglang_plugin.tools.serve", "serve_main", "sglang.launch_server on the kunlun platform"),
        ("scale-out", "kunlun_triton.tools.scale_out", "main",
         "bytes per MoE layer and token at EP 2/4/8 vs TP; --host-time: collectives vs torch.distributed"),
    ):
        p = sub.add_parser(name, help=text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(run=_delegate(module, function))
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if argv[:2] == ["bench", "speculative"]:  # SGLang engines, its own options (tools/speculative_bench.py)
        from .tools.speculative_bench import main as speculative_main

        return speculative_main(argv[2:])
    if argv and argv[0] in ("tune", "inspect", "convert-weights", "models", "regress", "serve", "scale-out"):
        # argparse's REMAINDER drops a leading option (`convert-weights --model-path ...`),
        # so these commands get their arguments untouched and parse them themselves
        args = parser.parse_args(argv[:1])
        args.rest = argv[1:]
    else:
        args = parser.parse_args(argv)
    from .runtime.config import ConfigError
    from .runtime.env import EnvError

    try:
        if args.command in ("doctor", "bench", "tune"):
            _enable_interpreter_on_cpu()
        return args.run(args)
    except (OSError, EnvError, ConfigError) as exc:
        # A file it cannot read or write (--output, --output-dir, --json, a
        # checkpoint shard), a malformed variable or config file: one line
        # naming it and exit 2, as for a bad flag, not a traceback.
        where = f" {exc.filename}" if isinstance(exc, OSError) and exc.filename else ""
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"kunlun-triton {args.command}: error:{where}: {what}"[:2000], file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
