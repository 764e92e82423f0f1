"""Activation: what SGLang's entry points call (re-exported by the package,
``kunlun_triton.sglang_plugin:activate`` etc. in pyproject.toml).

- ``sglang.srt.platforms``: ``kunlun`` -> `activate` returns the platform
  class's qualified name, or ``None`` when it should stay out of the way;
  ``kunlun_triton`` -> `activate_alternate`, the same platform under a name no
  other distribution claims (Baidu's ``sglang-kunlun`` also registers
  ``kunlun``; SGLang keeps one entry point per name), answering only when
  ``SGLANG_PLATFORM=kunlun_triton`` selects it (see ``conflicts.py``);
- ``sglang.srt.plugins``: `register` runs early in every SGLang process and
  applies the ``plugin`` scope of the install table (``install.py``).

Activation rules:

1. a Kunlun card (``kunlun_triton.runtime`` detection: ``torch_xmlir`` or
   ``xpu-smi``, or ``KUNLUN_TRITON_TARGET=kunlun``): the platform runs on
   device ``cuda`` through the vendor's torch build;
2. ``SGLANG_PLATFORM=kunlun`` with ``KUNLUN_TRITON_TARGET=cuda|hip`` on a GPU
   machine: the same platform on that GPU (to measure our kernels there);
3. ``SGLANG_PLATFORM=kunlun`` anywhere else: development mode, on the CPU with
   the Triton interpreter (``TRITON_INTERPRET=1``), said once in the log;
4. otherwise ``None``: the plugin never hijacks a CUDA machine.

Imports no SGLang at module level: SGLang loads entry points while it is
still resolving its platform.
"""

from __future__ import annotations

import logging

from ...runtime.env import env_flag
from .conflicts import report_platform_conflicts
from .mode import enter_dev_mode, gpu_target_forced, leave_dev_mode, on_card, selected, selected_by_alternate_name
from .names import DEV_PLATFORM, DEVICE_PLATFORM, LOGGER
from .versions import SUPPORTED_SGLANG_VERSIONS, WINDOW, installed_version

logger = logging.getLogger(LOGGER)


class UnsupportedSGLangVersion(RuntimeError):
    pass


def sglang_version() -> str | None:
    return installed_version("sglang")


def check_sglang_version(found: str | None = None) -> str:
    """Raise :class:`UnsupportedSGLangVersion` unless SGLang is in the window."""
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


def activate() -> str | None:
    """Entry point ``kunlun`` of ``sglang.srt.platforms``: the platform class
    name or None."""
    report_platform_conflicts()
    return _activate()


def activate_alternate() -> str | None:
    """Entry point ``kunlun_triton`` of ``sglang.srt.platforms``: the same
    platform, only when ``SGLANG_PLATFORM=kunlun_triton`` names it (without a
    selection SGLang activates every entry point: answering under both names
    would be "multiple platform plugins activated")."""
    report_platform_conflicts()
    return _activate() if selected_by_alternate_name() else None


def _activate() -> str | None:
    chosen = selected()
    if on_card() or (chosen and gpu_target_forced()):
        check_sglang_version()
        leave_dev_mode()
        _register_cli_choices()
        return DEVICE_PLATFORM
    if chosen:
        check_sglang_version()
        enter_dev_mode()
        _register_cli_choices()
        return DEV_PLATFORM
    return None


def _register_cli_choices() -> None:
    """Our backend names in SGLang's argument choices (and ``mxfp4`` among its
    quantization names: layers/mxfp4.py), from activation: SGLang
    skips our general plugin whenever SGLANG_PLATFORM is set (we register two
    platform names); the platform applies the rest itself (init_backend,
    apply_server_args_defaults)."""
    # Function-level: the install table reaches every hook module; SGLang
    # asks the entry point before it has resolved its platform.
    from ..install_steps import register_cli_choices
    from ..layers.mxfp4 import register_mxfp4_when_loaded

    register_cli_choices()
    register_mxfp4_when_loaded()


def register() -> None:
    """Entry point of ``sglang.srt.plugins``: register backends and fused ops.

    General plugins run in every SGLang process, whichever platform is
    active: where ours is not (no card, SGLANG_PLATFORM unset), an SGLang
    version we do not support is no reason to break SGLang, so we step aside.
    """
    report_platform_conflicts()
    try:
        check_sglang_version()
    except UnsupportedSGLangVersion:
        if selected() or on_card():
            raise
        logger.debug("kunlun-triton: unsupported SGLang and platform not selected; not registering")
        return
    import sglang  # noqa: F401  (import SGLang fully before our modules that use it)

    if selected() and not gpu_target_forced() and not on_card():
        # Before any of our kernels is imported: Triton decides at
        # @triton.jit time whether a kernel runs in the interpreter.
        enter_dev_mode()
    # Function-level, after the mode is set: the install table's hooks import
    # our kernels, which Triton jit-decorates for the mode in force then.
    from ..install import install

    install("plugin")
