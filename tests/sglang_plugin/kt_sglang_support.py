"""Helpers shared by the SGLang plugin tests (imported by name: tests/ is not a package)."""

from __future__ import annotations

import os

ENGINE_DEFAULTS = dict(
    dtype="float32",
    max_total_tokens=2048,
    max_running_requests=8,
    random_seed=0,
    log_level="error",
)


def start_sglang_engine(model_path, **kwargs):
    os.environ["SGLANG_PLATFORM"] = "kunlun"
    import sglang

    return sglang.Engine(model_path=model_path, **kwargs)


def start_engine(model_path, **kwargs):
    """An ``sglang.Engine`` on the kunlun platform (development mode here), the
    only one alive in this process (kt_engines: the previous one is shut down)."""
    import kt_engines

    return kt_engines.start(start_sglang_engine, model_path, **{**ENGINE_DEFAULTS, **kwargs})


def output_ids(out):
    return list(out["output_ids"])
