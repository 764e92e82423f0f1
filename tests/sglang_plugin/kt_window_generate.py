"""Run by test_sglang_window.py in a fresh process (its PYTHONPATH picks the
SGLang release): greedy tokens of a tiny model on the kunlun platform, with
the SGLang version, as JSON on the last stdout line (the caller reads the
logs on stderr).

    python kt_window_generate.py MODEL_DIR
"""

from __future__ import annotations

import json
import sys


def main(model_path: str) -> None:
    import os

    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    import sglang

    from kt_sglang_support import ENGINE_DEFAULTS, start_sglang_engine

    engine = start_sglang_engine(model_path, **{**ENGINE_DEFAULTS, "page_size": 4, "log_level": "warning"})
    try:
        prompts = [[1, 15, 27, 3, 99], [1, 7, 7, 42]]
        params = {"max_new_tokens": 6, "temperature": 0.0, "ignore_eos": True}
        outs = engine.generate(input_ids=prompts, sampling_params=params)
        tokens = [list(o["output_ids"]) for o in outs]
        from sglang.srt.platforms import current_platform

        from kunlun_triton.sglang_plugin.report import engine_dispatch_report

        platform = type(current_platform).__name__
        report = engine_dispatch_report(engine)[0]["ops"]
        triton_ops = sorted(op for op, row in report.items() if row["impl"] == "triton")
    finally:
        engine.shutdown()
    print(json.dumps({"sglang": sglang.__version__, "sglang_file": sglang.__file__, "platform": platform,
                      "tokens": tokens, "triton_ops": triton_ops}))


if __name__ == "__main__":
    main(sys.argv[1])
