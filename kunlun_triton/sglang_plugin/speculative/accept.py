"""Accept length of speculative decoding, gathered in the scheduler process
(the dispatch report's ``"accept"``) from SGLang's own per-request counters.

SGLang 0.5.23 counts per request, in the scheduler, ``req.spec_verify_ct``
(target verify steps the request took part in) and
``req.spec_num_correct_drafts`` (draft tokens the verify accepted, the bonus
token excluded); its tokenizer manager turns them into ``meta_info``:
``spec_accept_length = completion_tokens / spec_verify_ct`` (the first token,
from prefill, counted in ``completion_tokens``). The request objects die with
the request, so an AROUND hook on the output streamer's accumulator
(``_GenerationStreamAccumulator.accept``, where SGLang copies those counters
into the outgoing batch) adds each request's final counters, once, when its
finished output is sent. Over the requests finished so far:

- ``accept_length`` = sum completion_tokens / sum spec_verify_ct (SGLang's
  per-request definition, pooled);
- ``accept_rate`` = correct drafts / drafts proposed (verify steps x
  (num_draft_tokens - 1)), as SGLang's meta_info;
- ``tokens_per_target_forward`` = tokens after the first (the decode tokens)
  / verify steps: what one forward of the target gives a request (1 without
  speculative decoding: one decode forward per token); ``accept_length``
  without the prefill token. ``verify_forwards`` (our backend's count of
  target verify batches, speculative.py) says how many forwards those steps
  were batched into.
"""

from __future__ import annotations

ACCEPT_HOOK = "sglang.srt.managers.scheduler_components.output_streamer._GenerationStreamAccumulator.accept"

_TOTALS = {"requests": 0, "completion_tokens": 0, "verify_steps": 0, "correct_drafts": 0}


def count_finished_request(original, self, *, req):
    """AROUND hook: a request whose finished output this call sends adds its
    counters (SGLang sends a finished request once: ``finished_output``)."""
    sending_final = req.finished() and not getattr(req, "finished_output", False)
    result = original(self, req=req)
    spec = getattr(self, "spec_algorithm", None)
    if sending_final and getattr(req, "finished_output", False) and spec is not None and not spec.is_none():
        _TOTALS["requests"] += 1
        _TOTALS["completion_tokens"] += len(req.output_ids_through_stop)
        _TOTALS["verify_steps"] += int(req.spec_verify_ct)
        _TOTALS["correct_drafts"] += int(req.spec_num_correct_drafts)
    return result


def accept_ratios(counts: dict, num_draft_tokens: int) -> dict:
    """`counts` (requests, completion_tokens, verify_steps, correct_drafts,
    verify_forwards) with the ratios above added (None where a denominator is 0)."""
    t = dict(counts)
    proposed = t["verify_steps"] * max(int(num_draft_tokens) - 1, 0)
    t["accept_length"] = t["completion_tokens"] / t["verify_steps"] if t["verify_steps"] else None
    t["accept_rate"] = t["correct_drafts"] / proposed if proposed else None
    decode_tokens = t["completion_tokens"] - t["requests"]
    t["tokens_per_target_forward"] = decode_tokens / t["verify_steps"] if t["verify_steps"] else None
    return t


def accept_report(verify_forwards: int, num_draft_tokens: int) -> dict:
    """This scheduler's totals over the requests finished so far, and the ratios."""
    return accept_ratios({**_TOTALS, "verify_forwards": int(verify_forwards)}, num_draft_tokens)


def reset_accept_report() -> None:
    for key in _TOTALS:
        _TOTALS[key] = 0
