"""What a communicator is built from: its errors, the backend per target and
the timeout (see ``communicator.py``'s docstring for what they mean)."""

from __future__ import annotations

import math
import numbers

import torch.distributed as dist

from ..runtime.env import EnvError, env_float, env_str

DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 365 * 24 * 3600.0  # a year: beyond it a "timeout" is a hang


class CollectiveError(RuntimeError):
    """A collective failed; the message names it and its group."""


class CollectiveTimeout(CollectiveError):
    """A collective did not complete within the group's timeout. The group is
    unusable afterwards (the collective may still be pending in the backend):
    end the process rather than retry on it."""


def default_backend(target_name: str | None = None) -> str:
    forced = env_str("KUNLUN_TRITON_DIST_BACKEND")
    if forced:
        # torch's own backends plus the ones a vendor build registers (bkcl):
        # a typo fails here naming the variable, not in init_process_group.
        known = sorted({b for b in dist.Backend.backend_list if b not in ("undefined", "fake")} | {"bkcl"})
        if forced.lower() not in known:
            raise EnvError("KUNLUN_TRITON_DIST_BACKEND", forced, "one of " + ", ".join(known))
        return forced.lower()
    if target_name is None:
        from ..runtime import current_target

        target_name = current_target().name
    from ..runtime.capabilities import profile  # the target's collective backend is a fact of its profile

    return profile(target_name).collective_backend


def timeout_seconds(timeout_s=None, where: str = "TPCommunicator") -> float:
    """``timeout_s`` checked (a finite number of seconds > 0 that a
    ``timedelta`` holds), or ``KUNLUN_TRITON_COMM_TIMEOUT_S`` when None."""
    if timeout_s is None:
        value = env_float("KUNLUN_TRITON_COMM_TIMEOUT_S", DEFAULT_TIMEOUT_S)  # EnvError unless finite and > 0
        if value > MAX_TIMEOUT_S:
            raise EnvError("KUNLUN_TRITON_COMM_TIMEOUT_S", env_str("KUNLUN_TRITON_COMM_TIMEOUT_S"),
                           f"a number of seconds in (0, {MAX_TIMEOUT_S:g}]")
        return value
    ok = isinstance(timeout_s, numbers.Real) and not isinstance(timeout_s, bool)
    value = float(timeout_s) if ok else math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise ValueError(
            f"{where}: timeout_s must be a finite number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout_s!r}"
        )
    return value
