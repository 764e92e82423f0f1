"""`kunlun-triton regress` checks every argument and the golden file before an
engine starts (issue 39, item 5): one ``error:`` line per problem, exit status
2, no traceback, nothing started. The engine and the tokenizer are replaced by
functions that fail the test if reached."""

from __future__ import annotations

import json
import os

import pytest

from kunlun_triton.sglang_plugin.tools import regress

STEP = [[5, -0.1], [7, -2.5]]
GOOD = {"model": "m", "dtype": "float32", "max_new_tokens": 2,
        "cases": {"english": {"input_ids": [1, 2], "output_ids": [5, 5], "top5": [STEP, STEP]}}}


@pytest.fixture
def model_dir(tmp_path, monkeypatch):
    def no_engine(*args, **kwargs):
        raise AssertionError("an engine was started")

    monkeypatch.setattr(regress, "start_engine", no_engine)
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        regress.main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, captured
    assert "Traceback" not in captured.err and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert all(line.startswith("error: ") for line in lines), lines
    return lines


def test_a_golden_that_is_not_json_is_one_line(tmp_path, model_dir, capsys):
    bad = tmp_path / "g.json"
    bad.write_text("{not json")
    (line,) = errors(["--model", str(model_dir), "--golden", str(bad)], capsys)
    assert "not valid JSON" in line and str(bad) in line


@pytest.mark.parametrize("mutate,expected", [
    (lambda g: g.update(cases={}), '"cases" must be a non-empty object'),
    (lambda g: g.update(max_new_tokens=0), '"max_new_tokens" must be an integer >= 1'),
    (lambda g: g["cases"]["english"].update(output_ids="abc"), '"output_ids" must be a non-empty list'),
    (lambda g: g["cases"]["english"].update(top5=[[["x", 1.0]]] * 2), '"top5" must be a list'),
    (lambda g: g["cases"]["english"].update(top5=[STEP]), "1 top5 steps for 2 output ids"),
    (lambda g: g.clear() or g.update(cases=[1]), '"cases" must be a non-empty object'),
], ids=["no-cases", "zero-tokens", "ids-not-list", "top5-entries", "steps-count", "cases-list"])
def test_a_golden_of_the_wrong_shape_is_named(tmp_path, model_dir, capsys, mutate, expected):
    data = json.loads(json.dumps(GOOD))
    mutate(data)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    lines = errors(["--model", str(model_dir), "--golden", str(path)], capsys)
    assert any(expected in line for line in lines), lines


def test_every_bad_argument_at_once_before_an_engine(tmp_path, model_dir, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if os.access(locked, os.W_OK):  # root: a directory that does not exist instead
            target = tmp_path / "no-such-dir" / "g.json"
        else:
            target = locked / "g.json"
        lines = errors(["--model", str(model_dir), "--record", "--golden", str(target), "--max-new-tokens", "0",
                        "--tp-size", "0", "--atol", "nan", "--cases", "english,klingon"], capsys)
    finally:
        os.chmod(locked, 0o700)
    joined = "\n".join(lines)
    assert len(lines) == 5, lines
    for part in ("--max-new-tokens must be >= 1", "--tp-size must be >= 1", "--atol must be a finite number",
                 "klingon", f"--golden {target}"):
        assert part in joined, (part, lines)


def test_a_missing_local_model_says_so(tmp_path, model_dir, capsys):
    golden = tmp_path / "g.json"
    golden.write_text(json.dumps(GOOD))
    (line,) = errors(["--model", str(tmp_path / "nowhere"), "--golden", str(golden)], capsys)
    assert line == (f"error: --model {tmp_path / 'nowhere'}: no such local directory (and not a known model: "
                    "smollm2, qwen2.5-0.5b); regress reads a local checkpoint")
    (line,) = errors(["--model", str(tmp_path), "--golden", str(golden)], capsys)
    assert "no config.json there" in line and "::" not in line


def test_good_arguments_reach_the_engine(tmp_path, model_dir, monkeypatch):
    """The checks refuse nothing valid: a good golden file gets as far as starting an engine."""
    golden = tmp_path / "g.json"
    golden.write_text(regress.dump_golden(GOOD))
    import types

    monkeypatch.setitem(__import__("sys").modules, "transformers",
                        types.SimpleNamespace(AutoTokenizer=types.SimpleNamespace(from_pretrained=lambda p: None)))
    with pytest.raises(AssertionError, match="an engine was started"):
        regress.main(["--model", str(model_dir), "--golden", str(golden)])
