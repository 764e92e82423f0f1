"""A Qwen model end to end: Qwen2.5-Coder-0.5B-Instruct (qwen2: q/k/v biases,
untied head, 151,936-token vocabulary, rope base 1e6, 14 query heads over 2 KV
heads) from ``kunlun-triton models fetch qwen2.5-0.5b``, served by SGLang on
the kunlun platform (development mode: every op on Triton in the interpreter),
float32, against HF transformers eager float32 on the same checkpoint, and
against the committed golden file.

Quick form (CI; a decode step of 24 layers at this vocabulary is several
seconds in the interpreter, see docs/real-model.md for the measured time):
English, Chinese and code prompts x 4 tokens as one batch: tokens equal to
HF's, top-5 logprobs within the bound, and the golden file.
``KUNLUN_TRITON_REGRESSION=full``: plus 16 tokens, teacher-forced logprobs, each prompt alone, second turns through the
radix cache, the checkpoint against HF's own GGUF loader, and
test_regression_sglang_qwen_full.py (bf16, sampling, W8A8-INT8, fp8 KV).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kt_regression_support import FULL
from test_regression_sglang_smollm2 import conversations

from kunlun_triton.sglang_plugin.tools.regress import CASES as PROMPTS
from kunlun_triton.sglang_plugin.tools.regress import compare_top5, encode, greedy, run_cases, teacher_forced

pytestmark = pytest.mark.regression

GOLDEN = Path(__file__).parent / "golden" / "qwen2.5-0.5b-fp32.json"
# The ~1500-token system prompt is SmolLM2's only: its float32 prefill through 24 layers at this
# width did not finish within 29 minutes in the interpreter on 2 shared cores (load average ~11)
CASES = ["english", "chinese", "code"]
NEW = 16 if FULL else 4
# nats, float32, ours vs HF eager on the same checkpoint: the SmolLM2 bound (25x its measured 3.8e-5;
# measured here: see the print of test_greedy_batch_equals_hf_eager_float32)
LOGPROB_ATOL = 1e-3
GOLDEN_ATOL = 1e-3


@pytest.fixture(scope="module")
def engine(qwen, engines):
    return engines.get(qwen, page_size=1)


@pytest.fixture(scope="module")
def runs(engine, hf_qwen):
    """The fixed prompts, greedy, as one batch (top-5 logprobs per step)."""
    return run_cases(engine, hf_qwen.tokenizer, CASES, NEW)


def _worst(run, steps):
    return max((abs(lp - float(s[tid])) for top, s in zip(run["top5"], steps) for tid, lp in top), default=0.0)


def test_greedy_batch_equals_hf_eager_float32(runs, hf_qwen):
    worst = 0.0
    for name, run in runs.items():
        want, steps = hf_qwen.greedy(run["input_ids"], NEW)
        assert run["output_ids"] == want, (name, hf_qwen.tokenizer.decode(run["output_ids"]),
                                           hf_qwen.tokenizer.decode(want))
        worst = max(worst, _worst(run, steps))
    print(f"\nQwen2.5-0.5B float32 greedy, {len(runs)} prompts x {NEW}: worst |logprob - HF| {worst:.2e}")
    assert worst <= LOGPROB_ATOL, worst


def test_golden_file(runs):
    """The committed golden file (kunlun-triton regress --record on this checkpoint)."""
    golden = json.loads(GOLDEN.read_text())
    assert golden["dtype"] == "float32" and {"english", "chinese", "code"} <= set(golden["cases"])
    n = min(NEW, golden["max_new_tokens"])
    for name in [c for c in runs if c in golden["cases"]]:
        run, want = runs[name], golden["cases"][name]
        assert run["input_ids"] == want["input_ids"], name
        assert run["output_ids"][:n] == want["output_ids"][:n], name
        assert compare_top5(want["top5"][:n], run["top5"][:n], GOLDEN_ATOL, name) == []


if FULL:

    def test_teacher_forced_logprobs_within_tolerance(engine, runs, hf_qwen):
        """Prompt + HF's greedy tokens in one prefill: top-1 HF's at every step, top-5 within the bound."""
        prompts = [runs[n]["input_ids"] for n in CASES]
        forced = [hf_qwen.greedy(p, NEW)[0] for p in prompts]
        for name, p, f, steps in zip(CASES, prompts, forced, teacher_forced(engine, prompts, forced)):
            assert len(steps) == len(f)
            lp = hf_qwen.logprobs(p + f)[len(p) - 1:len(p) - 1 + len(f)]
            for i, top in enumerate(steps):
                assert top[0][0] == int(lp[i].argmax()), (name, i)
                for tid, logprob in top:
                    assert abs(logprob - float(lp[i][tid])) <= LOGPROB_ATOL, (name, i, tid, logprob)

    def test_each_prompt_alone_equals_hf(engine, hf_qwen):
        for name in CASES:
            ids = encode(hf_qwen.tokenizer, PROMPTS[name])
            (run,) = greedy(engine, [ids], NEW)
            assert run["output_ids"] == hf_qwen.greedy(ids, NEW)[0], name

    def test_second_turns_through_the_radix_cache_equal_hf(engine, hf_qwen):
        """2 conversations x 2 turns at once: turn 2 reuses its prefix (cached_tokens > 0)
        and gives HF's tokens for the same prompt."""
        record = conversations(engine, hf_qwen.tokenizer, 2, 2, 6)
        for turn, (prompts, results) in enumerate(record):
            for p, r in zip(prompts, results):
                assert r["output_ids"] == hf_qwen.greedy(p, len(r["output_ids"]))[0], turn
                if turn:
                    assert r["cached_tokens"] > 0, (turn, r["cached_tokens"])

    def test_checkpoint_equals_transformers_gguf_loader(qwen):
        """Our conversion of the real file against HF's own GGUF reader (gguf.quants'
        dequantization): every tensor bitwise (Q4_K, Q5_0, Q6_K, Q8_0, F32), tokenizer alike."""
        import torch
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

        from kunlun_triton.tools.models import gguf_path

        gguf_file = gguf_path("qwen2.5-0.5b")
        ours = load_file(str(Path(qwen) / "model.safetensors"))
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(qwen))
        theirs = load_gguf_checkpoint(str(gguf_file), return_tensors=True, model_to_load=skeleton)["tensors"]
        assert set(ours) == set(theirs) and "lm_head.weight" in ours  # untied head
        for name, tensor in theirs.items():
            assert torch.equal(ours[name], torch.as_tensor(tensor).float()), name
        tok_ours = AutoTokenizer.from_pretrained(qwen)
        tok_theirs = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
        for text in ("Hello, world! 12345", "中国的首都是哪个城市？", "def f(x):\n    return x ** 2"):
            assert tok_ours(text)["input_ids"] == tok_theirs(text)["input_ids"]
        messages = [{"role": "user", "content": "Hi"}]
        assert encode(tok_ours, messages) == encode(tok_theirs, messages)
