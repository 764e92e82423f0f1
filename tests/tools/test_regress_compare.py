"""`kunlun-triton regress`'s comparison and golden-file format, without an engine
(the engine side runs in tests/regression): hand-made disagreements must each be
reported, agreement must report nothing, and the file must read back as written."""

from __future__ import annotations

import json

import pytest

from kunlun_triton.sglang_plugin.tools.regress import compare_top5, dump_golden, main

GOLDEN = [[[5, -0.1], [7, -2.5], [9, -3.0]], [[1, -0.5], [2, -1.2], [3, -4.0]]]


def test_agreement_within_tolerance_reports_nothing():
    near = [[[5, -0.12], [9, -3.01], [4, -3.5]], [[1, -0.49], [2, -1.21], [8, -5.0]]]
    assert compare_top5(GOLDEN, near, 0.05, "case") == []


def test_each_disagreement_is_reported():
    flipped = [[[7, -0.1], [5, -0.2]], [[1, -0.5], [2, -1.0]]]
    problems = compare_top5(GOLDEN, flipped, 0.05, "case")
    assert len(problems) == 2
    assert problems[0].startswith("case step 0: top-1 7") and "golden 5" in problems[0]
    assert problems[1].startswith("case step 1: token 2 logprob -1.0000, golden -1.2000")
    assert compare_top5(GOLDEN, GOLDEN[:1], 0.05, "case") == ["case: 1 steps, golden 2"]
    nan = [[[5, float("nan")]], GOLDEN[1]]
    assert len(compare_top5(GOLDEN, nan, 0.05, "case")) == 1  # a NaN is never within tolerance


def test_golden_file_reads_back_and_has_a_line_per_step():
    data = {"model": "m", "dtype": "float32", "max_new_tokens": 2, "cases": {
        "english": {"input_ids": [1, 2, 3], "output_ids": [5, 1], "ttft_s": 0.5, "tpot_s": None, "top5": GOLDEN},
        "chinese": {"input_ids": [4], "output_ids": [9, 9], "ttft_s": 0.1, "tpot_s": 0.2, "top5": GOLDEN}}}
    text = dump_golden(data)
    assert json.loads(text) == data
    assert "    [[5, -0.1], [7, -2.5], [9, -3.0]]," in text.splitlines()


def test_record_never_overwrites_and_compare_needs_a_file(tmp_path, capsys):
    existing = tmp_path / "golden.json"
    existing.write_text("{}")
    with pytest.raises(SystemExit):
        main(["--model-path", str(tmp_path), "--record", "--golden", str(existing)])
    assert "refusing to overwrite" in capsys.readouterr().err and existing.read_text() == "{}"
    with pytest.raises(SystemExit):
        main(["--model-path", str(tmp_path), "--golden", str(tmp_path / "absent.json")])
    assert "record one first" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model-path", str(tmp_path), "--record", "--cases", "english,klingon"])
    assert "klingon" in capsys.readouterr().err
