"""The regression suite's full form (``KUNLUN_TRITON_REGRESSION=full``; not
collected otherwise): the multi-turn matrix and the half-precision
checkpoints. Each engine start is a minute or more on 2 cores.

- 4 conversations x 3 turns at once, page sizes 1 and 16 x chunked prefill on
  (32-token chunks) and off: turns 2 and 3 reuse their prefix
  (cached_tokens > 0) and every turn gives the tokens of the same
  conversations with the radix cache off (which give HF's);
- bf16 and fp16 checkpoints (convert-weights --dtype from the float32 one):
  teacher-forced on HF float32's greedy tokens, the top-1 agreement with
  them is printed and held above a floor measured here.
"""

from __future__ import annotations

import pytest
from test_regression_sglang_smollm2 import conversations

from kunlun_triton.sglang_plugin.tools.regress import CASES, encode, run_cases, teacher_forced

pytestmark = pytest.mark.regression

N_CONV, TURNS, NEW = 4, 3, 6
# top-1 agreement with float32 (teacher-forced, 4 cases x 16 tokens), measured 2026-12-03 (after
# issue 28's round-to-nearest-even bf16 stores): bf16 1.000 and fp16 1.000 of 64 steps; the floor
# allows 3 flips.
AGREEMENT_FLOOR = {"bfloat16": 0.95, "float16": 0.95}


@pytest.fixture(scope="module")
def cache_off(smollm2, engines, hf_smollm2):
    engine = engines.get(smollm2, page_size=1, disable_radix_cache=True)
    record = conversations(engine, hf_smollm2.tokenizer, N_CONV, TURNS, NEW)
    for prompts, results in record:
        for p, r in zip(prompts, results):
            assert r["output_ids"] == hf_smollm2.greedy(p, NEW)[0]
    return record


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("chunked", [32, -1], ids=["chunked", "unchunked"])
def test_multi_turn_matrix_equals_cache_off(smollm2, engines, hf_smollm2, cache_off, page_size, chunked):
    # Unchunked, SGLang 0.5.23 sizes its static memory fraction on the CPU below zero (-0.046:
    # "Loaded weights leave no GPU memory for the KV cache"; the scheduler dies and SIGQUITs
    # this process): a fixed fraction, the pool being capped by max_total_tokens anyway.
    memory = {} if chunked > 0 else {"mem_fraction_static": 0.5}
    engine = engines.get(smollm2, page_size=page_size, chunked_prefill_size=chunked, **memory)
    record = conversations(engine, hf_smollm2.tokenizer, N_CONV, TURNS, NEW)
    for turn, ((prompts, results), (want_prompts, want)) in enumerate(zip(record, cache_off)):
        assert prompts == want_prompts, turn
        assert [r["output_ids"] for r in results] == [w["output_ids"] for w in want], turn
        if turn:
            assert all(r["cached_tokens"] > 0 for r in results), [r["cached_tokens"] for r in results]


@pytest.mark.parametrize("dtype,short", [("bfloat16", "bf16"), ("float16", "fp16")])
def test_half_precision_checkpoint_top1_agreement(smollm2, engines, hf_smollm2, tmp_path_factory, dtype, short):
    from kunlun_triton.tools.convert_weights import convert

    path = tmp_path_factory.mktemp("half") / f"smollm2-{short}"
    convert(smollm2, path, dtype=short, progress=False)
    names = ["english", "chinese", "code", "long_system"]
    tok = hf_smollm2.tokenizer
    prompts = [encode(tok, CASES[n]) for n in names]
    forced = [hf_smollm2.greedy(p, 16)[0] for p in prompts]
    engine = engines.get(str(path), dtype=dtype, page_size=1)
    steps = teacher_forced(engine, prompts, forced)
    agree = [top[0][0] == f for s, fs in zip(steps, forced) for top, f in zip(s, fs)]
    rate = sum(agree) / len(agree)
    print(f"\n{dtype} checkpoint: teacher-forced top-1 agreement with float32 HF {rate:.3f} ({len(agree)} steps)")
    free = run_cases(engine, tok, names[:1], 8)["english"]
    print(f"{dtype} greedy answer to {names[0]!r}: {tok.decode(free['output_ids'])!r}")
    assert rate >= AGREEMENT_FLOOR[dtype]
