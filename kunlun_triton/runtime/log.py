"""One logger for the package; ``KUNLUN_TRITON_DEBUG=1`` turns on debug lines."""

from __future__ import annotations

import logging

from .env import cached_flag

logger = logging.getLogger("kunlun_triton")

debug_enabled = cached_flag("KUNLUN_TRITON_DEBUG", False)


def _configure() -> None:
    if logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[kunlun_triton %(levelname)s] %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    try:
        debug = debug_enabled()
    except ValueError:  # KUNLUN_TRITON_DEBUG=maybe: said by whoever reads it next (the tools: one line, exit 2)
        debug = False
    logger.setLevel(logging.DEBUG if debug else logging.INFO)


_configure()
