"""One module per op family, each offering the tools two functions:

- ``doctor_checks(device) -> list[OpCheck]``: a small input per op, run
  through the public op and through its torch reference;
- ``bench_cases(preset, args) -> Iterable[BenchCase]``: shapes from a model
  preset (or the command line) with the implementations to time side by side.

Modules here are discovered, so a new family needs no registration.
"""

from __future__ import annotations

import importlib
import pkgutil


def family_modules() -> dict:
    """``{family name: module}`` for every module in this package."""
    return {
        info.name: importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    }
