"""Request guard: refuse, with a 400 naming the field, every request that
would otherwise reach SGLang's scheduler in a state that kills it.

A second fuzz of the public surface (issue 25) stopped the whole server (a
scheduler exception ends every process) with single requests that SGLang
0.5.23's own checks let through:

- ``top_k`` >= 2**31: int32 overflow building ``SamplingBatchInfo``;
- prompt token ids outside ``[0, vocab)`` (``"prompt": [1, 2, 100000]``,
  negative ids, ``/generate`` ``input_ids``): ``IndexError`` in the
  embedding;
- ``top_logprobs_num`` (OpenAI ``logprobs`` / ``top_logprobs``) above the
  vocabulary: ``selected index k out of range`` in the logprob top-k;
- and, answered with a wrong message rather than a crash, OpenAI ``n`` <= 0
  ("range() arg 3 must not be zero") or negative ``logprobs``.

Two hooks, both in the tokenizer manager's process, before a request is
tokenized into what the scheduler receives (a ``ValueError`` there is what
SGLang's ``/generate`` and OpenAI handlers already answer with HTTP 400):

- BEFORE ``GenerateReqInput.normalize_batch_and_arguments`` (the first thing
  ``TokenizerManager.generate_request`` does, for /generate, the OpenAI
  layer and ``Engine`` alike): sampling parameters and logprob counts that
  need no model (``n`` feeds the batch expansion done right there);
- BEFORE ``TokenizerManager._validate_one_request(obj, input_ids)`` (per
  request, after tokenization): token ids and logprob counts against the
  model's vocabulary.

The guard steps aside (checks nothing) when the kunlun platform is not the
active one: it is a plugin-scope touchpoint, which runs in every SGLang
process whatever the platform.
"""

from __future__ import annotations

import functools
import numbers

from .mode import on_card, selected

INT32_MAX = 2**31 - 1
MAX_N = 1024  # parallel samples per prompt: n copies of the prompt are built at once
NORMALIZE_HOOK = "sglang.srt.managers.io_struct.GenerateReqInput.normalize_batch_and_arguments"
VALIDATE_HOOK = "sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request"


@functools.lru_cache(maxsize=1)
def _active() -> bool:
    return selected() or on_card()


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _integer(field: str, value, low: int, high: int, hint: str = "") -> None:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON clients may send 40.0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{field} must be an integer, got {_short(value)}")
    if not low <= value <= high:
        raise ValueError(f"{field} must be in [{low}, {high}]{hint}, got {_short(value)}")


def _each(value):
    return value if isinstance(value, (list, tuple)) else [value]


def check_sampling_params(params) -> None:
    """One request's sampling parameters (a dict, as SGLang receives them)."""
    if not isinstance(params, dict):
        return  # SGLang's own parsing answers other shapes
    if params.get("n") is not None:
        _integer("n", params["n"], 1, MAX_N)
    top_k = params.get("top_k")
    if top_k is not None and top_k != -1:
        _integer("top_k", top_k, 1, INT32_MAX, " or -1 (no top-k)")


def check_generate_request(obj) -> None:
    """The vocabulary-free checks on a GenerateReqInput, before SGLang normalises it."""
    for params in _each(obj.sampling_params):
        check_sampling_params(params)
    for num in _each(getattr(obj, "top_logprobs_num", None)):
        if num is not None:
            _integer("top_logprobs_num (OpenAI logprobs / top_logprobs)", num, 0, INT32_MAX)


def check_against_vocab(obj, input_ids, vocab_size: int) -> None:
    """One request's token ids and logprob count against the model's vocabulary."""
    if input_ids is not None and len(input_ids) > 0:
        bad = next((i for i, t in enumerate(input_ids)
                    if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 0 <= t < vocab_size), None)  # fmt: skip
        if bad is not None:
            raise ValueError(f"input_ids (prompt token ids): token {_short(input_ids[bad])} at position {bad} "
                             f"is not an id of the vocabulary [0, {vocab_size})")  # fmt: skip
    for num in _each(getattr(obj, "top_logprobs_num", None)):
        if num is not None:
            _integer("top_logprobs_num (OpenAI logprobs / top_logprobs)", num, 0, vocab_size, " (the vocabulary size)")
    if hasattr(obj, "sampling_params"):
        for params in _each(obj.sampling_params):
            check_sampling_params(params)


def guard_normalize(obj, *args, **kwargs):
    """BEFORE hook on ``GenerateReqInput.normalize_batch_and_arguments``."""
    if _active():
        check_generate_request(obj)


def guard_validate(manager, obj, input_ids=None, *args, **kwargs):
    """BEFORE hook on ``TokenizerManager._validate_one_request(obj, input_ids)``."""
    if not _active():
        return
    from sglang.srt.managers.io_struct import GenerateReqInput

    vocab = getattr(getattr(manager, "model_config", None), "vocab_size", None)
    if isinstance(obj, GenerateReqInput) and vocab:
        check_against_vocab(obj, input_ids, int(vocab))
    elif vocab and input_ids:
        check_against_vocab(None, input_ids, int(vocab))
