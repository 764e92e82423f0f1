"""The request guard's checks on their own (the HTTP fuzz in
test_sglang_http_server.py sends them through a real server). Oracle: the
limits the issue names (int32 top_k, n >= 1, ids in [0, vocab), logprob
counts in [0, vocab]); each refusal is a ValueError naming the field and
leaves the request as it was."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from kunlun_triton.sglang_plugin import request_guard as guard

VOCAB = 512


def _req(**kw):
    base = {"sampling_params": {"max_new_tokens": 4}, "top_logprobs_num": 0}
    return SimpleNamespace(**{**base, **kw})


BAD = [
    ("top_k", _req(sampling_params={"top_k": 2**31})),
    ("top_k", _req(sampling_params={"top_k": 0})),
    ("top_k", _req(sampling_params={"top_k": "5"})),
    ("top_k", _req(sampling_params=[{"top_k": 5}, {"top_k": 2**40}])),
    ("n", _req(sampling_params={"n": 0})),
    ("n", _req(sampling_params={"n": -1})),
    ("n", _req(sampling_params={"n": guard.MAX_N + 1})),
    ("top_logprobs_num", _req(top_logprobs_num=-1)),
    ("top_logprobs_num", _req(top_logprobs_num=[0, -3])),
]


@pytest.mark.parametrize("field,req", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_vocabulary_free_checks_name_the_field(field, req):
    before = copy.deepcopy(vars(req))
    with pytest.raises(ValueError, match=field):
        guard.check_generate_request(req)
    assert vars(req) == before


@pytest.mark.parametrize("ids,field", [([1, 2, VOCAB], "input_ids"), ([-1], "input_ids"), ([1, 2.5], "input_ids"),
                                       ([True], "input_ids")])  # fmt: skip
def test_token_ids_outside_the_vocabulary_are_refused(ids, field):
    with pytest.raises(ValueError, match=field):
        guard.check_against_vocab(_req(), list(ids), VOCAB)


def test_logprob_counts_above_the_vocabulary_are_refused():
    with pytest.raises(ValueError, match="top_logprobs_num"):
        guard.check_against_vocab(_req(top_logprobs_num=VOCAB + 1), [1, 2], VOCAB)


def test_good_requests_pass():
    for req in (_req(), _req(sampling_params={"top_k": -1, "n": 2}), _req(sampling_params={"top_k": 2**31 - 1}),
                _req(sampling_params={"top_k": 40.0}), _req(top_logprobs_num=VOCAB)):  # fmt: skip
        guard.check_generate_request(req)
        guard.check_against_vocab(req, [0, 1, VOCAB - 1], VOCAB)


def test_the_guard_is_in_the_install_table_as_a_plugin_hook():
    from kunlun_triton.sglang_plugin.install import TOUCHPOINTS

    point = next(p for p in TOUCHPOINTS if p.name == "request guard")
    assert point.scope == "plugin" and "TokenizerManager._validate_one_request" in point.sglang
