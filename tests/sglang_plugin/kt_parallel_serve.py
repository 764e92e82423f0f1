"""Run by the scale-out engine tests in a process of its own: one
``sglang.Engine`` on the kunlun platform, the scale-out prompts one by one,
batched and as radix-cache second turns, then every rank's dispatch report,
as JSON on the last stdout line (SGLang's logs go to stderr).

    python kt_parallel_serve.py MODEL_DIR OPTIONS_JSON PROMPTS_JSON

OPTIONS_JSON: ``sglang.Engine`` options over ``kt_sglang_support.ENGINE_DEFAULTS``.
PROMPTS_JSON: ``[[token ids], ...]``. With ``node_rank >= 1`` in the options
this process is a second node: its Engine only runs that node's schedulers,
and it waits until the caller stops it.

Why a process of its own: an engine whose schedulers sit under a
data-parallel controller (``--dp-size``, DP attention) hung twice when held
by the pytest process on a 2-core machine, and served the same prompts from
a plain script (docs/scale-out.md); a separate process also lets the test
stop a hung engine at its timeout, which a test holding the engine cannot.
"""

from __future__ import annotations

import json
import sys

NEW = 4  # kt_scale_out.NEW


def serve(engine, prompts):
    params = {"max_new_tokens": NEW, "temperature": 0.0, "ignore_eos": True}

    def ids(outs):
        return [list(o["output_ids"]) for o in outs]

    alone = [list(engine.generate(input_ids=p, sampling_params=params)["output_ids"]) for p in prompts[:2]]
    batched = ids(engine.generate(input_ids=prompts, sampling_params=params))
    again = engine.generate(input_ids=prompts[:2], sampling_params=params)
    return {"alone": alone, "batched": batched, "again": ids(again),
            "cached_tokens": [o["meta_info"].get("cached_tokens", 0) for o in again]}  # fmt: skip


def main(model_path: str, options: str, prompts_file: str) -> None:
    import os

    os.environ.setdefault("SGLANG_PLATFORM", "kunlun")
    from kt_sglang_support import ENGINE_DEFAULTS, start_sglang_engine

    kwargs = {**ENGINE_DEFAULTS, **json.loads(options)}
    engine = start_sglang_engine(model_path, **kwargs)
    if kwargs.get("node_rank", 0) >= 1:
        return  # SGLang's Engine on a non-zero node returns once its schedulers have exited
    from kunlun_triton.sglang_plugin.report import engine_dispatch_report

    try:
        with open(prompts_file) as f:
            result = serve(engine, json.load(f))
        result["reports"] = {str(rank): rep for rank, rep in engine_dispatch_report(engine).items()}
    finally:
        engine.shutdown()
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
