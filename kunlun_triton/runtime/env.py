"""Every environment variable the package reads, parsed one way.

docs/environment.md lists each variable with its meaning;
tests/runtime/test_env_reads.py fails on a raw ``os.environ`` read elsewhere
in the package or its scripts, and on a variable read here but missing from
that table.

A malformed value is an error that names the variable and what it accepts,
never a silent default: ``KUNLUN_TRITON_CHECK=nope`` must not turn checks off
or on by accident. No torch import here: the SGLang plugin reads these before
anything heavy is loaded.
"""

from __future__ import annotations

import math
import os

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


class EnvError(ValueError):
    """An environment variable holds a value its reader cannot accept."""

    def __init__(self, name: str, raw: str, expected: str):
        super().__init__(f"{name}={raw!r}: expected {expected}")


# os.environ.get encodes the name and decodes the value on every read (about
# 1 us); switches read on every op call go to the mapping underneath instead
# (kept in step with os.environ, monkeypatch.setenv included) where it exists.
_ENV_BYTES = getattr(os.environ, "_data", None) if os.name == "posix" else None
_encoded: dict = {}


def raw_env_token(name: str):
    """The raw value of `name` (bytes on POSIX, else str; None when unset),
    undecoded: the same object (``is``) while the variable is left alone, a
    new one when it is set or unset, equal for equal values. For switches
    read on every op call: a "same as last time?" test or a dict key costs
    one lookup, no decoding."""
    if _ENV_BYTES is None:
        return os.environ.get(name)
    key = _encoded.get(name)
    if key is None:
        key = _encoded[name] = os.fsencode(name)
    return _ENV_BYTES.get(key)


def env_str(name: str, default: str | None = None) -> str | None:
    """The stripped value of `name`, or `default` when unset or blank."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return raw.strip()


def env_is_set(name: str) -> bool:
    """Whether `name` is in the environment at all (blank included)."""
    return name in os.environ


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    """An integer >= `minimum`, or `default` when unset."""
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise EnvError(name, raw, f"an integer >= {minimum}")
    return value


def env_flag(name: str, default: bool) -> bool:
    """A boolean switch: 1/0, true/false, yes/no, on/off (any case)."""
    raw = env_str(name)
    if raw is None:
        return default
    word = raw.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise EnvError(name, raw, "one of " + ", ".join(f"{t}/{f}" for t, f in zip(TRUE_WORDS, FALSE_WORDS)))


def cached_flag(name: str, default: bool):
    """A function returning `env_flag(name, default)`, parsed once per raw
    value: for switches read on every op call."""
    parsed: dict = {}

    def read() -> bool:
        raw = raw_env_token(name)
        value = parsed.get(raw)
        if value is None:
            value = parsed[raw] = env_flag(name, default)
        return value

    return read


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of `choices` (lower-cased), or `default` when unset."""
    raw = env_str(name)
    if raw is None:
        return default
    if raw.lower() not in choices:
        raise EnvError(name, raw, "one of " + ", ".join(choices))
    return raw.lower()


def env_float(name: str, default: float, *, positive: bool = True) -> float:
    """A finite number (> 0 when `positive`), or `default` when unset."""
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (positive and value <= 0):
        raise EnvError(name, raw, "a finite number" + (" > 0" if positive else ""))
    return value
