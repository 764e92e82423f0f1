"""SGLang out-of-tree platform plugin: ``SGLANG_PLATFORM=kunlun``.

Entry points, declared in pyproject.toml:

- ``sglang.srt.platforms``: ``kunlun`` -> :func:`activate` returns the
  platform class's qualified name, or ``None`` when it should stay out of the
  way; ``kunlun_triton`` -> :func:`activate_alternate`, the same platform
  under a name no other distribution claims (Baidu's ``sglang-kunlun`` also
  registers ``kunlun``; SGLang keeps one entry point per name), answering only
  when ``SGLANG_PLATFORM=kunlun_triton`` selects it (see ``conflicts.py``);
- ``sglang.srt.plugins``: :func:`register` runs early in every SGLang process
  and applies the ``plugin`` scope of the install table (``install.py``):
  the ``kunlun_triton`` attention and sampling backends, the fused-op
  forwards and the report hooks.

Supported SGLang releases: ``versions.py`` (the window, and what each
release calls what).

Activation rules:

1. a Kunlun card (``kunlun_triton.runtime`` detection: ``torch_xmlir`` or
   ``xpu-smi``, or ``KUNLUN_TRITON_TARGET=kunlun``): the platform runs on
   device ``cuda`` through the vendor's torch build;
2. ``SGLANG_PLATFORM=kunlun`` with ``KUNLUN_TRITON_TARGET=cuda|hip`` on a GPU
   machine: the same platform on that GPU (to measure our kernels there);
3. ``SGLANG_PLATFORM=kunlun`` anywhere else: development mode, on the CPU with
   the Triton interpreter (``TRITON_INTERPRET=1``), said once in the log;
4. otherwise ``None``: the plugin never hijacks a CUDA machine.

Importing this module imports neither SGLang nor torch; every SGLang import in
kunlun-triton lives under this package.
"""

from __future__ import annotations

import logging
import os

from .versions import SUPPORTED_SGLANG_VERSIONS, WINDOW

logger = logging.getLogger("kunlun_triton.sglang_plugin")

PLATFORM_NAME = "kunlun"
ALTERNATE_NAME = "kunlun_triton"  # the entry-point name no other distribution claims
DEVICE_PLATFORM = "kunlun_triton.sglang_plugin.platform:KunlunPlatform"
DEV_PLATFORM = "kunlun_triton.sglang_plugin.platform:KunlunDevPlatform"
DEV_MODE_ENV = "KUNLUN_TRITON_SGLANG_DEV"

_said_dev_mode = False


class UnsupportedSGLangVersion(RuntimeError):
    pass


def sglang_version() -> str | None:
    from .versions import installed_version

    return installed_version("sglang")


def check_sglang_version(found: str | None = None) -> str:
    """Raise :class:`UnsupportedSGLangVersion` unless SGLang is in the window."""
    from kunlun_triton.runtime.env import env_flag

    if env_flag("KUNLUN_TRITON_ALLOW_ANY_SGLANG", False):
        return found or sglang_version() or "unknown"
    found = found if found is not None else sglang_version()
    if found is None:
        raise UnsupportedSGLangVersion(
            "kunlun-triton's SGLang plugin needs SGLang, which is not installed: "
            f"pip install 'kunlun-triton[sglang]' (SGLang {', '.join(SUPPORTED_SGLANG_VERSIONS)})"
        )
    if found not in SUPPORTED_SGLANG_VERSIONS:
        raise UnsupportedSGLangVersion(
            f"kunlun-triton's SGLang plugin supports SGLang {', '.join(SUPPORTED_SGLANG_VERSIONS)} "
            f"(the window {WINDOW}), found {found}: the platform hooks it relies on change between "
            f"SGLang releases. Install one in the window (pip install 'kunlun-triton[sglang]' "
            f"'sglang=={SUPPORTED_SGLANG_VERSIONS[-1]}'), or set KUNLUN_TRITON_ALLOW_ANY_SGLANG=1 to "
            f"try anyway (the hooks of the nearest release below it are used)."
        )
    return found


def _gpu_target_forced() -> bool:
    from kunlun_triton.runtime.env import env_str

    return (env_str("KUNLUN_TRITON_TARGET") or "").lower() in ("cuda", "hip")


def _selected() -> bool:
    """SGLANG_PLATFORM names this plugin (by either entry-point name)."""
    from kunlun_triton.runtime.env import env_str

    return env_str("SGLANG_PLATFORM") in (PLATFORM_NAME, ALTERNATE_NAME)


def _selected_by_alternate_name() -> bool:
    from kunlun_triton.runtime.env import env_str

    return env_str("SGLANG_PLATFORM") == ALTERNATE_NAME


def _enter_dev_mode() -> None:
    global _said_dev_mode
    from kunlun_triton.runtime.env import env_str

    os.environ[DEV_MODE_ENV] = "1"
    if env_str("TRITON_INTERPRET") != "1":
        os.environ["TRITON_INTERPRET"] = "1"
    # Re-detect: a detection cached before TRITON_INTERPRET was set said "torch".
    from kunlun_triton.runtime import detect_target

    detect_target.cache_clear()
    if not _said_dev_mode:
        _said_dev_mode = True
        logger.warning(
            "kunlun-triton: SGLANG_PLATFORM=kunlun on a machine without a Kunlun card: "
            "development mode, on the CPU with the Triton interpreter (TRITON_INTERPRET=1); "
            "slow, for correctness only"
        )


def activate() -> str | None:
    """Entry point ``kunlun`` of ``sglang.srt.platforms``: the platform class
    name or None."""
    from .conflicts import report_platform_conflicts

    report_platform_conflicts()
    return _activate()


def activate_alternate() -> str | None:
    """Entry point ``kunlun_triton`` of ``sglang.srt.platforms``: the same
    platform, only when ``SGLANG_PLATFORM=kunlun_triton`` names it (without a
    selection SGLang activates every entry point: answering under both names
    would be "multiple platform plugins activated")."""
    from .conflicts import report_platform_conflicts

    report_platform_conflicts()
    return _activate() if _selected_by_alternate_name() else None


def _activate() -> str | None:
    selected = _selected()
    from kunlun_triton.runtime import detect_target

    target = detect_target()
    if target.name == "kunlun" or (selected and _gpu_target_forced()):
        check_sglang_version()
        os.environ.pop(DEV_MODE_ENV, None)
        _register_cli_choices()
        return DEVICE_PLATFORM
    if selected:
        check_sglang_version()
        _enter_dev_mode()
        _register_cli_choices()
        return DEV_PLATFORM
    return None


def _register_cli_choices() -> None:
    """Our backend names in SGLang's argument choices, from activation: SGLang
    skips our general plugin whenever SGLANG_PLATFORM is set (we register two
    platform names); the platform applies the rest itself (init_backend,
    apply_server_args_defaults)."""
    from .install import register_cli_choices

    register_cli_choices()


def dev_mode() -> bool:
    """True in CPU development mode, where the plugin runs the ops checked
    (``check=True``, ``check_positions=True``). On a device it runs them
    unchecked (a host sync per call saved), which is safe under SGLang's
    invariants: the attention backend builds ``kv_indptr``/``qo_indptr`` as
    cumulative sums of SGLang's lengths, ``kv_indices`` come from
    ``req_to_token`` rows and ``out_cache_loc`` from the allocator (slots of
    pages it handed out; padded tokens write slot 0), and positions stay
    below the context length the scheduler enforces, which the rope cache
    covers. A bug breaking them would read outside the KV pool or the cache
    (wrong outputs, or a fault that ends the process) and, through
    ``store_kv``, write into unrelated memory. See docs/design.md's table of
    opt-outs."""
    from kunlun_triton.runtime.env import env_str

    return env_str(DEV_MODE_ENV) == "1"


def register() -> None:
    """Entry point of ``sglang.srt.plugins``: register backends and fused ops.

    General plugins run in every SGLang process, whichever platform is
    active: where ours is not (no card, SGLANG_PLATFORM unset), an SGLang
    version we do not support is no reason to break SGLang, so we step aside.
    """
    from kunlun_triton.runtime import detect_target

    from .conflicts import report_platform_conflicts

    report_platform_conflicts()
    try:
        check_sglang_version()
    except UnsupportedSGLangVersion:
        if _selected() or detect_target().name == "kunlun":
            raise
        logger.debug("kunlun-triton: unsupported SGLang and platform not selected; not registering")
        return
    import sglang  # noqa: F401  (import SGLang fully before our modules that use it)

    if _selected() and not _gpu_target_forced():
        if detect_target().name != "kunlun":
            # Before any of our kernels is imported: Triton decides at
            # @triton.jit time whether a kernel runs in the interpreter.
            _enter_dev_mode()
    from .install import install

    install("plugin")


__all__ = [
    "SUPPORTED_SGLANG_VERSIONS",
    "UnsupportedSGLangVersion",
    "WINDOW",
    "activate",
    "activate_alternate",
    "check_sglang_version",
    "dev_mode",
    "register",
]
