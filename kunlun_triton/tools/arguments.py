"""What `doctor`, `bench` and `tune` check before they run anything: counts
on the command line, flags the chosen mode would ignore, and the
environment (target, backend, the package's switches).

Each failure is one line naming the flag or the variable, exit status 2,
instead of a table of per-op exceptions (or "WRONG" for ops that never ran)
with exit status 0.
"""

from __future__ import annotations

import argparse

USAGE_ERROR = 2  # argparse's status for a bad command line; ours for a bad environment too


def count(minimum: int):
    """An argparse ``type``: an integer >= `minimum` (``--repeat 0``,
    ``--warmup -1`` and ``--repeat 2.5`` are refused by the parser)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = count(1)
non_negative_int = count(0)


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (``--peak-gbps``)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def ignored_flags(args, mode: str, flags: dict) -> str | None:
    """A message naming the flags of `flags` (``{"--flag": attribute}``) that
    the user gave (not None, not False, not empty) although `mode` ignores
    them; None when there are none."""
    given = [flag for flag, attr in flags.items() if getattr(args, attr, None) not in (None, False, [], ())]
    if not given:
        return None
    return f"{mode} ignores {', '.join(given)}: drop {'it' if len(given) == 1 else 'them'}"


def environment_problem() -> str | None:
    """Why the tools cannot run as the environment asks, naming the
    variable, or None. Reads every switch the ops and the allocator read, so
    a malformed one fails here once instead of in every op."""
    import torch

    from ..runtime.dispatch import forced_backend
    from ..runtime.env import env_flag, env_str
    from ..runtime.target import current_target

    try:
        target = current_target()
        backend = forced_backend()
        for name, default in (("KUNLUN_TRITON_CHECK", True), ("KUNLUN_TRITON_POOL_CHECKED", True),
                              ("KUNLUN_TRITON_DEBUG", False)):  # fmt: skip
            env_flag(name, default)
    except ValueError as exc:  # EnvError, or an unknown KUNLUN_TRITON_TARGET
        return str(exc)
    if target.device_type == "cuda" and not torch.cuda.is_available():
        forced = env_str("KUNLUN_TRITON_TARGET")
        why = f"KUNLUN_TRITON_TARGET={forced}" if forced else f"target {target.name} ({target.reason})"
        return f"{why}: its tensors live on a cuda device, but torch sees none on this machine"
    if backend == "triton" and not target.is_triton:
        return (f"KUNLUN_TRITON_BACKEND=triton, but target {target.name} has no Triton path ({target.reason}); "
                "unset one of them")
    return None


def output_dir_problem(flag: str, path) -> str | None:
    """Why `path` cannot be the directory a command writes into (it is a
    file, or neither it nor its first existing parent is writable), or
    None; checked before the command runs, not after minutes of work."""
    return _writable_problem(flag, path, directory=True)


def output_file_problem(flag: str, path) -> str | None:
    """Same for a file the command writes (`inspect --json`)."""
    return _writable_problem(flag, path, directory=False)


def _writable_problem(flag: str, path, directory: bool) -> str | None:
    import os
    from pathlib import Path

    if not path:
        return None
    p = Path(path)
    try:
        if directory and p.exists() and not p.is_dir():
            return f"{flag} {path}: exists and is not a directory"
        if not directory and p.is_dir():
            return f"{flag} {path}: is a directory"
        start = p if directory else p.parent
        existing = next((q for q in (start, *start.parents) if q.exists()), None)
        if existing is None or not existing.is_dir():
            return f"{flag} {path}: {existing} is not a directory"
        if not os.access(existing, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
            return f"{flag} {path}: not writable"
    except OSError as exc:  # a name too long, a path through a file
        return f"{flag} {path}: {exc.strerror or exc}"
    return None
