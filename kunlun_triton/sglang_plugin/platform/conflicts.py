"""Another distribution's platform plugin named ``kunlun`` (Baidu's
``sglang-kunlun``), found and explained.

SGLang builds ``{entry_point.name: entry_point}`` over the
``sglang.srt.platforms`` group (``srt/platforms/__init__.py``,
``srt/plugins/__init__.py``, identical in 0.5.21 to 0.5.23): with two
distributions registering ``kunlun``, the one listed last wins and the other
is never called, silently. This module reads the same entry points the same
way and says, once per process, which distribution's plugin answers to
``kunlun`` and how to choose: ``SGLANG_PLATFORM=kunlun_triton`` (the name
only this plugin registers), or uninstalling one of them.

Reads ``importlib.metadata`` only: no SGLang import.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import entry_points

from .names import LOGGER, PLATFORM_NAME

logger = logging.getLogger(LOGGER)

GROUP = "sglang.srt.platforms"
OUR_DISTRIBUTION = "kunlun-triton"

_reported = False


@dataclass(frozen=True)
class PlatformClaim:
    distribution: str
    value: str  # "module:function"

    @property
    def ours(self) -> bool:
        return _normalize(self.distribution) == _normalize(OUR_DISTRIBUTION)


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def claims(name: str = PLATFORM_NAME, group: str = GROUP) -> list[PlatformClaim]:
    """Every distribution's entry point called `name`, in SGLang's order
    (the last one is the one SGLang keeps)."""
    found = []
    for ep in entry_points(group=group):
        if ep.name == name:
            dist = getattr(ep, "dist", None)
            found.append(PlatformClaim(dist.name if dist is not None else "unknown", ep.value))
    return found


def conflict_message(found: list[PlatformClaim]) -> str | None:
    """The explanation when more than one distribution claims ``kunlun``."""
    if len({_normalize(c.distribution) for c in found}) < 2:
        return None
    active = found[-1]
    listing = ", ".join(f"{c.distribution} ({c.value})" for c in found)
    others = sorted({c.distribution for c in found if not c.ours})
    return (
        f"kunlun-triton: {len(found)} distributions register the SGLang platform name 'kunlun': {listing}. "
        f"SGLang keeps one entry point per name: SGLANG_PLATFORM=kunlun runs {active.distribution}'s plugin "
        f"({active.value}). To choose: SGLANG_PLATFORM=kunlun_triton selects kunlun-triton's under the name only "
        f"it registers; or uninstall one (pip uninstall {' / '.join(others)}, or pip uninstall kunlun-triton)."
    )


def report_platform_conflicts() -> str | None:
    """Log the conflict (a warning, once per process); returns the message."""
    global _reported
    message = conflict_message(claims())
    if message and not _reported:
        _reported = True
        logger.warning(message)
    return message
