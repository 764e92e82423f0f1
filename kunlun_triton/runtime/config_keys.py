"""What each key of an op's autotune config must hold, checked when a file is read.

Every op declares its keys next to the op (``OpSpec.config_keys`` in its
family's ``spec.py``, launch options shared in `ops.spec.LAUNCH_KEYS`); a
launcher hands every op's rules to the lookup (``get_config(op,
rules=ops.spec.CONFIG_RULES, ...)``), so the runtime never imports an op. A
file is checked once per (path, mtime) by `runtime.config`, at the first
lookup that brings the rules, never per call:

- a value the kernel cannot take (a tile that is not a power of two, a count
  below 1, a word outside the choices, a bool where an int goes) raises
  `ConfigError` naming the file, the op and the key;
- a key an op does not declare, or an op no spec knows, is logged once as a
  warning (a file written for another version of the package still loads,
  and a typo is not silently ignored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .log import logger


@dataclass(frozen=True)
class ConfigKey:
    """One key's rule: `accepts(value)`, and the words an error shows."""

    expected: str
    accepts: Callable[[object], bool]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _power_of_two(value) -> bool:
    return _is_int(value) and value >= 1 and value & (value - 1) == 0


def _int_at_least(low: int) -> Callable[[object], bool]:
    return lambda value: _is_int(value) and value >= low


# Largest tile extent a key may ask for. Triton refuses any block over
# 2**20 elements (TRITON_MAX_TENSOR_NUMEL), and every tile key here is
# multiplied by another extent of at least 16 (head dim, columns, vocab
# block): 2**16 keeps the listed failures (decode BLOCK_N 2**20, greedy
# BLOCK_V 2**28) out of Triton, where they failed without naming the key.
MAX_TILE = 2**16

# A tl.arange / block extent: Triton needs a power of two.
TILE = ConfigKey(f"a power of two from 1 to {MAX_TILE} (an integer)",
                 lambda value: _power_of_two(value) and value <= MAX_TILE)
# A count or limit (programs, splits, tokens): any integer >= 1.
COUNT = ConfigKey("an integer >= 1", _int_at_least(1))
NON_NEGATIVE = ConfigKey("an integer >= 0", _int_at_least(0))
FLAG = ConfigKey("true, false, 0 or 1", lambda value: value in (0, 1) and type(value) in (bool, int))


def choice(*values) -> ConfigKey:
    """One of `values` (compared with their type: 16, not 16.0 or True)."""
    words = ", ".join(map(repr, values))
    return ConfigKey(f"one of {words}", lambda value: any(type(value) is type(v) and value == v for v in values))


_warned: set = set()


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def check_op_config(path, op: str, where: str, config: dict, known, from_error) -> None:
    """Check `config` (one ``config`` or ``by_shape[i].config`` of `op` in
    `path`) against `known` (``{op: {key: ConfigKey} or None}``, None: the
    op declares no keys); `from_error(key, expected, got)` builds the ConfigError."""
    if op not in known:
        warn_once(f"{path}: ops.{op}: no op of that name; its entry is never looked up (known: {', '.join(sorted(known))})")
        return
    keys = known[op]
    if keys is None:
        return
    for key, value in config.items():
        rule = keys.get(key)
        if rule is None:
            warn_once(f"{path}: {where}.{key}: {op} takes no such key; ignored (it takes {', '.join(sorted(keys))})")
        elif not rule.accepts(value):
            raise from_error(f"{where}.{key}", rule.expected, value)


def check_call_config(op: str, config, keys: dict | None = None) -> dict | None:
    """A per-call ``config=`` of `op`, checked like a file's entry: TypeError
    when it is not a mapping, ValueError naming the op and key for a value
    the kernels cannot take (an unknown key is warned about once). None
    passes through (look the config up). `keys`: the op's rules
    (``{key: ConfigKey}``, launch options included; None checks no values)."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise TypeError(f"{op}: config must be a dict of launch keys (e.g. {{'num_warps': 4}}), "
                        f"got {type(config).__name__}")
    bad = next((k for k in config if not isinstance(k, str)), None)
    if bad is not None:
        raise TypeError(f"{op}: config keys must be strings, got {bad!r}")

    def error(key, expected, got):
        text = repr(got)
        return ValueError(f"{op}: config[{key!r}] must be {expected}, got {text if len(text) <= 60 else text[:57] + '...'}")

    if keys is not None:
        for key, value in config.items():
            rule = keys.get(key)
            if rule is None:
                warn_once(f"{op}: config key {key!r} is not one it takes; ignored (it takes {', '.join(sorted(keys))})")
            elif not rule.accepts(value):
                raise error(key, rule.expected, value)
    return config
