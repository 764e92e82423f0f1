"""Launch configurations from ``autotune_configs/``, FlagGems-style lookup.

Files, most specific first: ``<target>-<arch>.yaml`` (e.g. ``cuda-sm_90``),
``<target>.yaml``, ``default.yaml``. Each has the shape::

    version: 1
    ops:
      rms_norm:
        source: measured | reasoned | tuned   # where the numbers come from
        config: {ROWS_PER_PROGRAM: 4, num_warps: 8}
        by_shape:                             # optional, first match wins
          - when: {hidden_size_max: 1024}     # <dim>_min / <dim>_max, inclusive
            config: {ROWS_PER_PROGRAM: 16}

Each file answers for an op with its ``config`` overlaid by its first
matching ``by_shape`` rule; the answers then overlay each other from the
least specific file to the most specific, so an architecture file's plain
value beats a shape rule in ``default.yaml``. Upper-case keys are kernel meta-parameters, lower-case
keys launch options (see `capabilities.launch_options`).

``KUNLUN_TRITON_CONFIG_DIR`` names a directory searched before the shipped
one, file by file (what ``kunlun-triton tune`` writes can live there); one
that does not exist is logged once as a warning and skipped.

Every value is checked against what the op's kernels take when its file is
first read by a lookup that brings the ops' rules (``get_config(...,
rules=...)``, what every launcher passes; `config_keys`: a bad tile size
raises `ConfigError` naming file, op and key; an unknown key or op is warned
about once), so lookups stay free.

`default.yaml` is the one home of every default: an explicit ``config=``
that sets only some keys is laid over the shipped ``default.yaml``'s answer
(`with_defaults`), so it behaves as the file with those keys changed.
"""

from __future__ import annotations

import functools
import reprlib
from pathlib import Path

from .config_keys import check_op_config, warn_once
from .env import env_str, raw_env_token
from .target import Target, current_target

SCALARS = (bool, int, float, str)
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


_BOUNDED = reprlib.Repr()
_BOUNDED.maxlevel, _BOUNDED.maxstring, _BOUNDED.maxother = 3, 120, 120


class ConfigError(ValueError):
    """A malformed autotune config file: names the file, the key, and what was expected."""

    def __init__(self, path, key: str, expected: str, got=None):
        # reprlib: bounded in depth, items and length. A whole value formatted
        # with repr took ~50 s and then MemoryError on a YAML alias bomb.
        got_part = "" if got is None else f", got {_BOUNDED.repr(got)}"
        super().__init__(f"{path}: {key}: expected {expected}{got_part}")


@functools.lru_cache(maxsize=1)
def shipped_config_dir() -> Path:
    # Source checkouts and editable installs keep the configs at the repo top;
    # wheels carry them inside the package (see pyproject's package-dir).
    for candidate in (_PACKAGE_DIR.parent / "autotune_configs", _PACKAGE_DIR / "autotune_configs"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no autotune_configs/ next to {_PACKAGE_DIR}")


def config_dirs() -> list[Path]:
    return list(_config_dirs(env_str("KUNLUN_TRITON_CONFIG_DIR")))


@functools.lru_cache(maxsize=8)
def _config_dirs(user_dir: str | None) -> tuple[Path, ...]:
    if user_dir:
        try:
            usable = Path(user_dir).is_dir()
            problem = "is not a directory"
        except (OSError, ValueError) as exc:  # a name too long, a NUL byte: refused by the OS
            usable, problem = False, f"cannot be used ({type(exc).__name__}: {exc.strerror or exc}"[:200] + ")"
        if not usable:
            warn_once(f"KUNLUN_TRITON_CONFIG_DIR={_BOUNDED.repr(user_dir)} {problem}; only the shipped configs are used")
            user_dir = None
    return ((Path(user_dir),) if user_dir else ()) + (shipped_config_dir(),)


def config_file_names(target: Target) -> list[str]:
    """Most specific first."""
    if target is _DEFAULTS_ONLY:
        return ["default.yaml"]
    names = [f"{target.name}.yaml", "default.yaml"]
    if target.arch:
        names.insert(0, f"{target.name}-{target.arch}.yaml")
    return names


def _check_mapping_of_scalars(path, key, value) -> dict:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, SCALARS) for k, v in value.items()
    ):
        raise ConfigError(path, key, "a mapping of names to numbers, booleans or strings", value)
    return value


def validate(data, path, rules=None) -> dict:
    """Check one parsed file; returns its ``ops`` mapping. With `rules`
    (``{op: {key: ConfigKey} or None}``) every value is checked against
    its op's keys too (`check_keys`)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(path, "<top level>", "a mapping with keys version, ops", data)
    unknown = set(data) - {"version", "target", "arch", "ops", "notes"}
    if unknown:
        raise ConfigError(path, sorted(unknown)[0], "one of version, target, arch, ops, notes")
    if data.get("version", 1) != 1:
        raise ConfigError(path, "version", "1", data.get("version"))
    ops = data.get("ops") or {}
    if not isinstance(ops, dict):
        raise ConfigError(path, "ops", "a mapping of op names to entries", ops)
    for op, entry in ops.items():
        where = f"ops.{op}"
        if not isinstance(entry, dict):
            raise ConfigError(path, where, "a mapping with config / by_shape / source", entry)
        extra = set(entry) - {"config", "by_shape", "source", "notes"}
        if extra:
            raise ConfigError(path, f"{where}.{sorted(extra)[0]}", "one of config, by_shape, source, notes")
        if entry.get("source", "reasoned") not in ("measured", "reasoned", "tuned"):
            raise ConfigError(path, f"{where}.source", "measured, reasoned or tuned", entry["source"])
        _check_mapping_of_scalars(path, f"{where}.config", entry.get("config", {}))
        shape_rules = entry.get("by_shape", [])
        if not isinstance(shape_rules, list):
            raise ConfigError(path, f"{where}.by_shape", "a list of {when, config} rules", shape_rules)
        for i, rule in enumerate(shape_rules):
            rkey = f"{where}.by_shape[{i}]"
            if not isinstance(rule, dict) or set(rule) != {"when", "config"}:
                raise ConfigError(path, rkey, "a mapping with exactly the keys when and config", rule)
            when = rule["when"]
            if not isinstance(when, dict) or not all(
                isinstance(k, str) and k.endswith(("_min", "_max")) and isinstance(v, (int, float))
                for k, v in when.items()
            ):
                raise ConfigError(path, f"{rkey}.when", "a mapping of <dim>_min/<dim>_max to numbers", when)
            _check_mapping_of_scalars(path, f"{rkey}.config", rule["config"])
    if rules is not None:
        check_keys(ops, path, rules)
    return ops


def check_keys(ops: dict, path, rules) -> None:
    """Check a validated file's ``ops`` against the ops' key `rules`."""
    for op, entry in ops.items():
        check_op_config(path, op, f"ops.{op}.config", entry.get("config", {}), rules, _error_in(path))
        for i, rule in enumerate(entry.get("by_shape", [])):
            check_op_config(path, op, f"ops.{op}.by_shape[{i}].config", rule["config"], rules, _error_in(path))


def _error_in(path):
    return lambda key, expected, got: ConfigError(path, key, expected, got)


@functools.lru_cache(maxsize=64)
def _load_file(path: Path, mtime: float) -> dict:
    return validate(read_yaml(path), path)


def read_yaml(path: Path):
    """A config file's parsed YAML; every failure a ConfigError naming the file."""
    import yaml  # here, not at import: importing the package reads no file

    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(path, "<file>", f"UTF-8 text (byte {exc.start} is not)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(path, "<yaml>", "valid YAML", str(exc).replace("<unicode string>", str(path))) from None
    except RecursionError:  # PyYAML recurses per level: 50,000 nested lists
        raise ConfigError(path, "<yaml>", "nesting a few levels deep, as a config is (it nests past Python's "
                          "recursion limit)") from None
    return data


_keys_checked: set = set()  # (path, mtime) of the files checked against the ops' key rules


def load_config_files(target: Target, rules=None) -> list[tuple[Path, dict]]:
    """The files that apply to `target`, most specific first, as (path, ops);
    with `rules` each is checked against the ops' keys once per (path, mtime)."""
    found = []
    for name in config_file_names(target):
        for directory in config_dirs():
            path = directory / name
            if path.is_file():
                mtime = path.stat().st_mtime
                ops = _load_file(path, mtime)
                if rules is not None and (path, mtime) not in _keys_checked:
                    check_keys(ops, path, rules)
                    _keys_checked.add((path, mtime))
                found.append((path, ops))
    return found


def _matches(when: dict, shape: dict, path, op) -> bool:
    for key, bound in when.items():
        dim, kind = key.rsplit("_", 1)
        if dim not in shape:
            raise ConfigError(path, f"ops.{op}.by_shape.when.{key}", f"a dimension {op} is looked up by: {sorted(shape)}")
        if (kind == "min" and shape[dim] < bound) or (kind == "max" and shape[dim] > bound):
            return False
    return True


def _resolve_in_file(entry: dict, shape: dict, path, op) -> dict:
    """One file's answer for `op`: its config, overlaid by its first matching rule."""
    config = dict(entry.get("config", {}))
    for rule in entry.get("by_shape", []):
        if _matches(rule["when"], shape, path, op):
            config.update(rule["config"])
            break
    return config


_resolved: dict = {}
_plan_caches: list[dict] = []


def clear_config_cache() -> None:
    """Forget resolved configs and the launch plans built from them (after
    writing a config file in this process)."""
    _resolved.clear()
    _load_file.cache_clear()
    _keys_checked.clear()
    for cache in _plan_caches:
        cache.clear()


def plan_cache(build):
    """Memoise a launcher's `build(*args)` (hashable args: dtype, head dims,
    ...) per target and ``KUNLUN_TRITON_CONFIG_DIR``: the config lookup and
    every constexpr derived from it happen once per shape class, not per
    call. `clear_config_cache` empties it; ``build.uncached`` builds afresh."""
    cache: dict = {}
    _plan_caches.append(cache)

    @functools.wraps(build)
    def cached(*args):
        key = (current_target(), raw_env_token("KUNLUN_TRITON_CONFIG_DIR"), args)
        plan = cache.get(key)
        if plan is None:
            plan = cache[key] = build(*args)
        return plan

    cached.uncached = build
    return cached


def get_config(op: str, target: Target | None = None, *, rules=None, **shape) -> dict:
    """The launch config for `op` on `target` (default: the current one) at `shape`.

    Resolved once per (op, target, shape, config dirs) and then served from
    memory: ops call this on every launch, so it must not touch the disk.
    `rules` (``{op: {key: ConfigKey} or None}``, launchers pass
    `ops.spec.CONFIG_RULES`): check each file against the ops' keys when
    first read.
    """
    return _resolve(op, target or current_target(), rules, shape)


# Stands for "default.yaml only" in `_resolve` (no target file above it).
_DEFAULTS_ONLY = Target("default", "", "cpu", "default.yaml only")


def default_config(op: str, *, rules=None, **shape) -> dict:
    """``default.yaml``'s answer for `op` at `shape` (a user directory's
    ``default.yaml`` over the shipped one): the one home of every default,
    what an explicit partial ``config=`` is laid over (`with_defaults`)."""
    return _resolve(op, _DEFAULTS_ONLY, rules, shape)


def with_defaults(op: str, config: dict, *, rules=None, **shape) -> dict:
    """An explicit `config` over `default_config` (the keys it leaves out
    take the file's values, as a tuned file entry would)."""
    return {**default_config(op, rules=rules, **shape), **config}


def _resolve(op: str, target: Target, rules, shape: dict) -> dict:
    key = (op, target, tuple(sorted(shape.items())), _config_dirs(env_str("KUNLUN_TRITON_CONFIG_DIR")), rules is None)
    if key not in _resolved:
        config: dict = {}
        for path, ops in reversed(load_config_files(target, rules)):
            if op in ops:
                config.update(_resolve_in_file(ops[op], shape, path, op))
        _resolved[key] = config
    return dict(_resolved[key])
