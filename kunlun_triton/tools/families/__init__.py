"""One module per op family, each offering the tools two functions:

- ``doctor_checks(device) -> list[OpCheck]``: a small input per op, run
  through the public op and through its torch reference;
- ``bench_cases(preset, args) -> Iterable[BenchCase]``: shapes from a model
  preset (or the command line) with the implementations to time side by side.
  Read each swept axis with ``presets.shape_values(args, "batch", [1, 8, 64])``
  so ``kunlun-triton bench --shape batch=4`` can replace it (``--shape`` of a
  preset field, e.g. ``hidden_size=1024``, arrives as a modified preset);
  ``args.quick`` asks for tiny shapes (CPU, CI). Impls named ``torch`` (the
  reference) and ``sglang`` (SGLang's kernel, when importable) get a ratio
  column each (``speedup_vs_torch``, ``speedup_vs_sglang``); `x_axis` names
  the param the plot of ``bench --output`` runs along.

And optionally, for ``kunlun-triton tune``:

- ``tune_space(preset, args) -> list[(op, shape, make_thunk, candidates)]``
  (or `tools.tune.TuneTask`s): per shape to tune, the dims the op passes to
  ``get_config(op, **shape)``, a ``make_thunk(config)`` that builds inputs and
  returns a no-argument callable launching the kernel with `config`, and the
  candidate config dicts. See `kunlun_triton.tools.tune`.

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


def sglang_baseline(name: str):
    """``kunlun_triton.sglang_plugin.baselines.<name>`` (SGLang's own kernels
    behind a thin adapter), or None where SGLang is absent or does not import:
    the bench then simply has no ``sglang`` column."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        return importlib.import_module(f"kunlun_triton.sglang_plugin.baselines.{name}")
    except Exception:  # an SGLang that does not import is treated as absent
        return None
