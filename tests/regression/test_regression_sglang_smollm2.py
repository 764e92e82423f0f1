"""A trained model end to end: SmolLM2-135M-Instruct (30 layers) served by
SGLang on the kunlun platform (development mode: every op on Triton in the
interpreter), float32, against HF transformers eager float32 on the same
checkpoint, and against the committed golden file.

Quick form (CI, about 4 minutes on 2 cores: a decode step of 30 layers is
several seconds in the interpreter): English, Chinese and code prompts x 4
tokens, one batch; teacher-forced logprobs; 2 conversations x 2 turns on the
radix cache. ``KUNLUN_TRITON_REGRESSION=full``: plus the ~1500-token system
prompt, 16 tokens, 4 conversations x 3 turns over page sizes 1/16 x chunked
prefill on/off against the cache off, and bf16/fp16 checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kt_regression_support import FULL

from kunlun_triton.sglang_plugin.tools.regress import compare_top5, encode, greedy, run_cases, teacher_forced

pytestmark = pytest.mark.regression

GOLDEN = Path(__file__).parent / "golden" / "smollm2-fp32.json"
CASES = ["english", "chinese", "code"] + (["long_system"] if FULL else [])
NEW = 16 if FULL else 4
# |logprob(ours) - logprob(HF)| in nats, float32: measured max 3.8e-5 over the golden file's
# 3 cases x 8 steps x top-5 (SGLang greedy in the interpreter vs HF eager on prompt + those
# tokens); the bound leaves 25x for other CPUs' summation orders
LOGPROB_ATOL = 1e-3
GOLDEN_ATOL = 1e-3  # same kernels as the recording: the same bound as against HF


@pytest.fixture(scope="module")
def engine(smollm2, engines):
    return engines.get(smollm2, page_size=1)


@pytest.fixture(scope="module")
def runs(engine, hf_smollm2):
    """The fixed prompts, greedy, as one batch (top-5 logprobs per step)."""
    return run_cases(engine, hf_smollm2.tokenizer, CASES, NEW)


def test_checkpoint_equals_transformers_gguf_loader(smollm2):
    """convert-weights --from-gguf against HF's own GGUF reader on the real file:
    every tensor bitwise, the tokenizer and chat template the same."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from kunlun_triton.tools.models import MODELS, cache_root

    gguf_file = cache_root() / "downloads" / MODELS["smollm2"].gguf
    ours = load_file(str(Path(smollm2) / "model.safetensors"))
    with torch.device("meta"):  # transformers maps GGUF names through a model's; no weights needed
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(smollm2))
    theirs = load_gguf_checkpoint(str(gguf_file), return_tensors=True, model_to_load=skeleton)["tensors"]
    assert set(ours) == set(theirs)  # tied embeddings: no lm_head in either
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], torch.as_tensor(tensor).float()), name
    tok_ours = AutoTokenizer.from_pretrained(smollm2)
    tok_theirs = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    for text in ("Hello, world! 12345", "中国的首都是哪个城市？", "def f(x):\n    return x ** 2"):
        assert tok_ours(text)["input_ids"] == tok_theirs(text)["input_ids"]
    messages = [{"role": "user", "content": "Hi"}]
    assert encode(tok_ours, messages) == encode(tok_theirs, messages)
    assert tok_ours.eos_token == "<|im_end|>"


def test_greedy_tokens_equal_hf_eager_float32(runs, hf_smollm2):
    worst = 0.0
    for name, run in runs.items():
        want, steps = hf_smollm2.greedy(run["input_ids"], NEW)
        assert run["output_ids"] == want, (name, hf_smollm2.tokenizer.decode(run["output_ids"]),
                                           hf_smollm2.tokenizer.decode(want))
        for top, lp in zip(run["top5"], steps):
            for tid, logprob in top:
                worst = max(worst, abs(logprob - float(lp[tid])))
    assert worst <= LOGPROB_ATOL, worst


def test_teacher_forced_logprobs_within_tolerance(engine, runs, hf_smollm2):
    """Prompt + HF's greedy tokens in one prefill: at every step our top-1 is HF's and
    our top-5 logprobs are HF's within the tolerance (an early flip hides nothing)."""
    prompts = [runs[n]["input_ids"] for n in CASES]
    forced = [hf_smollm2.greedy(p, NEW)[0] for p in prompts]
    ours = teacher_forced(engine, prompts, forced)
    for name, p, f, steps in zip(CASES, prompts, forced, ours):
        assert len(steps) == len(f)
        lp = hf_smollm2.logprobs(p + f)[len(p) - 1:len(p) - 1 + len(f)]
        for i, top in enumerate(steps):
            assert top[0][0] == int(lp[i].argmax()), (name, i)
            for tid, logprob in top:
                assert abs(logprob - float(lp[i][tid])) <= LOGPROB_ATOL, (name, i, tid, logprob, float(lp[i][tid]))


def test_golden_file(runs):
    """The committed golden file (kunlun-triton regress --record): same prompt ids, same
    tokens, top-5 logprobs within tolerance. A change that alters outputs shows as a diff."""
    golden = json.loads(GOLDEN.read_text())
    assert golden["dtype"] == "float32" and {"english", "chinese", "code"} <= set(golden["cases"])
    n = min(NEW, golden["max_new_tokens"])  # the file holds the quick cases x 8 tokens
    for name in [c for c in runs if c in golden["cases"]]:
        run, want = runs[name], golden["cases"][name]
        assert run["input_ids"] == want["input_ids"], name
        assert run["output_ids"][:n] == want["output_ids"][:n], name
        assert compare_top5(want["top5"][:n], run["top5"][:n], GOLDEN_ATOL, name) == []


QUESTIONS = ["What is the capital of France?", "Name a yellow fruit.", "What is 2 + 2?", "What color is the sky?"]
FOLLOW_UPS = ["Why?", "Say it in one word."]


def conversations(engine, tokenizer, n_conv, turns, new):
    """n_conv conversations at once, `turns` turns each through the chat template; each
    answer goes back into the history. Returns [(prompts, results)] per turn."""
    histories = [[{"role": "user", "content": q}] for q in QUESTIONS[:n_conv]]
    record = []
    for turn in range(turns):
        prompts = [encode(tokenizer, h) for h in histories]
        results = greedy(engine, prompts, new)
        record.append((prompts, results))
        for h, r in zip(histories, results):
            h.append({"role": "assistant", "content": tokenizer.decode(r["output_ids"], skip_special_tokens=True)})
            if turn + 1 < turns:
                h.append({"role": "user", "content": FOLLOW_UPS[turn % len(FOLLOW_UPS)]})
    return record


def test_multi_turn_reuses_the_radix_cache_and_matches_hf(engine, hf_smollm2):
    """Quick form: 2 conversations x 2 turns at once; turn 2 reuses its prefix
    (cached_tokens > 0) and gives HF's tokens for the same prompt (the cache-off answer)."""
    record = conversations(engine, hf_smollm2.tokenizer, 2, 2, NEW if not FULL else 6)
    for turn, (prompts, results) in enumerate(record):
        for p, r in zip(prompts, results):
            assert r["output_ids"] == hf_smollm2.greedy(p, len(r["output_ids"]))[0], turn
            if turn:
                assert r["cached_tokens"] > 0, (turn, r["cached_tokens"])
