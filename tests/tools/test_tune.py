"""`kunlun-triton tune`: search, write `<target>-<arch>.yaml`, runtime reads it.

The oracle for what gets written is the runtime's own lookup
(`runtime.get_config`), an independent reader of the format, on a search
whose winners are known in advance (candidates that sleep)."""

from __future__ import annotations

import pytest
import torch
import yaml

import fake_specs

from kunlun_triton.runtime import current_target, get_config
from kunlun_triton.tools import tune


@pytest.fixture
def fake_families(monkeypatch, tmp_path):
    fake_specs.install(monkeypatch)
    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", str(tmp_path))
    return tmp_path


def _target_file(directory):
    t = current_target()
    return directory / f"{t.name}-{t.arch}.yaml"


# ------------------------------------------------------------------- tests


def test_tuned_winners_are_what_the_runtime_returns(fake_families):
    assert tune.main(["sleepy_op", "--output-dir", str(fake_families), "--warmup", "0", "--repeat", "3"]) == 0
    written = yaml.safe_load(_target_file(fake_families).read_text())
    assert written["ops"]["sleepy_op"]["source"] == "tuned"
    # tuned at 16, 64 (a wins) and 256 (b wins); shapes between round up
    expected = {1: "a", 16: "a", 17: "a", 64: "a", 65: "b", 256: "b", 10**6: "b"}
    for n, variant in expected.items():
        assert get_config("sleepy_op", n=n)["VARIANT"] == variant, n


def test_refuses_an_existing_file_and_merges_with_force(fake_families):
    path = _target_file(fake_families)
    original = "version: 1\nops:\n  other_op:\n    source: measured\n    config: {BLOCK: 64}\n"
    path.write_text(original)
    assert tune.main(["sleepy_op", "--output-dir", str(fake_families), "--repeat", "1", "--warmup", "0"]) == 1
    assert path.read_text() == original
    assert tune.main(["sleepy_op", "--output-dir", str(fake_families), "--force", "--repeat", "3", "--warmup", "0"]) == 0
    assert get_config("other_op") == {"BLOCK": 64}
    assert get_config("sleepy_op", n=1000)["VARIANT"] == "b"


def test_dry_run_writes_nothing(fake_families, capsys):
    assert tune.main(["sleepy", "--output-dir", str(fake_families), "--dry-run", "--repeat", "1", "--warmup", "0"]) == 0
    assert not _target_file(fake_families).exists()
    assert "sleepy_op" in yaml.safe_load(capsys.readouterr().out.split("\n", 3)[-1])["ops"]


def test_unknown_op_is_an_error_naming_the_tunable_ones(fake_families, capsys):
    assert tune.main(["no_such_op", "--output-dir", str(fake_families)]) == 1
    err = capsys.readouterr().err
    assert "no_such_op" in err and "sleepy_op" in err and "scale_rows" in err


def test_a_triton_kernel_tunes_under_this_target(fake_families):
    """A real kernel through the whole path (the interpreter on CPU)."""
    assert tune.main(["scale_rows", "--output-dir", str(fake_families), "--repeat", "2", "--warmup", "1"]) == 0
    for n in (1, 4, 8, 100):
        config = get_config("scale_rows", num_tokens=n)
        assert config in ({"ROWS": 1, "BLOCK": 32}, {"ROWS": 4, "BLOCK": 32})
        # the chosen config computes the right thing
        x = torch.randn(n, 32)
        torch.testing.assert_close(fake_specs.scale_rows(x, config), 2 * x)


def test_rules_cover_a_grid_of_two_dims():
    results = [
        {"op": "o", "shape": {"b": b, "h": h}, "winner": {"W": f"{b}-{h}"}, "time_us": 1.0, "trials": []}
        for b in (1, 8) for h in (128, 4096)
    ]
    entry = tune.build_entry(results)
    from kunlun_triton.runtime.config import _matches

    def lookup(b, h):
        rules = [r["config"] for r in entry["by_shape"][:-1] if _matches(r["when"], {"b": b, "h": h}, "-", "o")]
        assert len(rules) <= 1, "cells overlap"
        return (rules or [entry["by_shape"][-1]["config"]])[0]["W"]

    assert entry["by_shape"][-1] == {"when": {}, "config": entry["config"]}

    assert [lookup(1, 100), lookup(2, 100), lookup(8, 129), lookup(50, 9999), lookup(1, 4096)] == [
        "1-128", "8-128", "8-4096", "8-4096", "1-4096"
    ]


def test_rms_norm_spec_tunes_rms_norm(monkeypatch, tmp_path):
    """The real spec, tiny search: the runtime then launches rms_norm with the
    tuned config and the op still matches its reference."""
    from kunlun_triton import ops
    from kunlun_triton.ops.norm import reference

    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", str(tmp_path))
    # the shipped configs may carry by_shape rules for rms_norm: tuned wins anyway
    assert tune.main(["rms_norm", "--quick", "--output-dir", str(tmp_path), "--repeat", "1", "--warmup", "0"]) == 0
    entry = yaml.safe_load(_target_file(tmp_path).read_text())["ops"]["rms_norm"]
    assert entry["source"] == "tuned" and entry["config"] in ({"ROWS_PER_PROGRAM": 1}, {"ROWS_PER_PROGRAM": 4})
    assert get_config("rms_norm", hidden_size=256)["ROWS_PER_PROGRAM"] == entry["config"]["ROWS_PER_PROGRAM"]
    device = current_target().device_type
    x, w = torch.randn(5, 256, device=device), torch.rand(256, device=device) + 0.5
    torch.testing.assert_close(ops.rms_norm(x, w), reference.rms_norm(x, w))
