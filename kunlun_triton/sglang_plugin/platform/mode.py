"""Which mode the plugin runs in, read from the environment of every process
SGLang starts: selected by ``SGLANG_PLATFORM``, on a card or a GPU forced by
``KUNLUN_TRITON_TARGET``, or CPU development mode (``KUNLUN_TRITON_SGLANG_DEV``,
set by the activation and inherited by SGLang's subprocesses).

A leaf (runtime only): the backends and layer hooks ask `dev_mode()` here,
the activation enters it; no module reads state from a package ``__init__``.
"""

from __future__ import annotations

import logging
import os

from ...runtime import capabilities, detect_target
from ...runtime.capabilities import profile
from ...runtime.env import env_str
from ...runtime.target import TARGET_NAMES
from .names import ALTERNATE_NAME, LOGGER, PLATFORM_NAME

DEV_MODE_ENV = "KUNLUN_TRITON_SGLANG_DEV"

logger = logging.getLogger(LOGGER)

_said_dev_mode = False


def selected() -> bool:
    """SGLANG_PLATFORM names this plugin (by either entry-point name)."""
    return env_str("SGLANG_PLATFORM") in (PLATFORM_NAME, ALTERNATE_NAME)


def selected_by_alternate_name() -> bool:
    return env_str("SGLANG_PLATFORM") == ALTERNATE_NAME


def gpu_target_forced() -> bool:
    """``KUNLUN_TRITON_TARGET`` names a GPU target (to measure our kernels
    there): a device target other than the platform's own card."""
    name = (env_str("KUNLUN_TRITON_TARGET") or "").lower()
    return name in TARGET_NAMES and profile(name).device and not profile(name).platform_card


def on_card() -> bool:
    """The detected target is the card the platform is named after."""
    return capabilities(detect_target()).platform_card


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
    return env_str(DEV_MODE_ENV) == "1"


def enter_dev_mode() -> None:
    global _said_dev_mode
    os.environ[DEV_MODE_ENV] = "1"
    if env_str("TRITON_INTERPRET") != "1":
        os.environ["TRITON_INTERPRET"] = "1"
    # Re-detect: a detection cached before TRITON_INTERPRET was set said "torch".
    detect_target.cache_clear()
    if not _said_dev_mode:
        _said_dev_mode = True
        logger.warning(
            "kunlun-triton: SGLANG_PLATFORM=kunlun on a machine without a Kunlun card: "
            "development mode, on the CPU with the Triton interpreter (TRITON_INTERPRET=1); "
            "slow, for correctness only"
        )


def leave_dev_mode() -> None:
    os.environ.pop(DEV_MODE_ENV, None)
