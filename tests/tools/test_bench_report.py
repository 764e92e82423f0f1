"""`kunlun-triton bench`: case selection, shape overrides, rows, and the
table / JSON / CSV / PNG outputs, on torch-only fake op specs."""

from __future__ import annotations

import csv
import io
import json
import types

import pytest
import torch

import fake_specs

from kunlun_triton.cli import main as cli_main
from kunlun_triton.tools import bench, report, timing
from kunlun_triton.tools.presets import MODEL_PRESETS, parse_shapes, peak_bandwidth_gbps, presets_for


@pytest.fixture
def fake(monkeypatch):
    fake_specs.install(monkeypatch, [s for s in fake_specs.SPECS if s.family == "fake"])


def _args(**kw):
    return types.SimpleNamespace(**{"quick": True, "shapes": {}, **kw})


# ------------------------------------------------------------ shapes


def test_parse_shapes():
    assert parse_shapes(["batch=1,8,context_len=512,4096", "dtype=fp16", "eps=1e-6"]) == {
        "batch": [1, 8], "context_len": [512, 4096], "dtype": ["fp16"], "eps": [1e-6],
    }
    assert parse_shapes(None) == {}
    for bad in ("1,2", "batch=", "=3"):
        with pytest.raises(ValueError):
            parse_shapes([bad])


def test_preset_fields_make_one_preset_per_combination():
    variants = presets_for("qwen2.5-7b", {"hidden_size": [64, 128], "head_dim": [64], "batch": [3]})
    assert [(p.hidden_size, p.head_dim, p.num_heads) for p in variants] == [(64, 64, 28), (128, 64, 28)]
    assert presets_for("qwen2.5-7b", {"batch": [3]}) == [MODEL_PRESETS["qwen2.5-7b"]]


def test_shapes_reach_the_specs(fake):
    cases = bench.collect_cases(["fake"], "llama-3-8b", _args(shapes={"batch": [3, 5], "hidden_size": [32]}))
    scale = [c for c in cases if c.op == "scale"]
    assert sorted({(c.params["batch"], c.params["hidden_size"]) for c in scale}) == [(3, 32), (5, 32)]
    cases = bench.collect_cases(["scale"], "llama-3-8b", _args())
    assert {c.op for c in cases} == {"scale"} and {c.params["dtype"] for c in cases} == {"float32"}
    assert [c.params["batch"] for c in cases] == [1, 4]  # quick batches


def test_unknown_name_lists_families_and_ops(fake):
    with pytest.raises(ValueError) as exc:
        bench.collect_cases(["nope"], "llama-3-8b", _args())
    assert "nope" in str(exc.value) and "fake" in str(exc.value) and "scale" in str(exc.value)
    assert cli_main(["bench", "nope", "--quick"]) == 2


# ------------------------------------------------------------ rows


def test_rows_ratios_and_a_broken_impl(fake):
    cases = bench.collect_cases(["fake"], "llama-3-8b", _args(shapes={"hidden_size": [16]}))
    rows = bench.run_bench(cases, warmup=0, repeat=2, peak_gbps=100.0)
    assert len(rows) == 2 * len(cases)  # triton and torch
    for r in rows:
        if r["op"] == "broken" and r["impl"] == "triton":
            assert r["time_us"] is None and "kernel exploded" in r["error"]
            continue
        base = next(b for b in rows if b["impl"] == "torch" and all(
            b.get(k) == r.get(k) for k in ("op", "batch", "dtype")))
        assert r["speedup_vs_torch"] == pytest.approx(base["time_us"] / r["time_us"])
        bytes_moved = 64 if r["op"] == "broken" else 2 * r["batch"] * 16 * 4
        assert r["gbps"] == pytest.approx(bytes_moved / (r["time_us"] * 1e-6) / 1e9)
        assert r["peak_fraction"] == pytest.approx(r["gbps"] / 100.0)
    table = bench.format_table(rows)
    assert "kernel exploded" in table and "speedup_vs_torch" in table


def test_cli_writes_json_csv_and_png(fake, tmp_path, capsys):
    out = tmp_path / "results"
    rc = cli_main(["bench", "fake", "--quick", "--warmup", "0", "--repeat", "2", "--shape", "batch=2,8,32",
                   "--shape", "hidden_size=16", "--output", str(out), "--metric", "time"])
    assert rc == 1  # the fake "broken" op raises: its row says so, and so does the exit status
    data = json.loads((out / "results.json").read_text())
    rows = data["results"]
    assert data["meta"]["preset"] == "llama-3-8b" and data["meta"]["shapes"]["batch"] == [2, 8, 32]
    assert {(r["op"], r["impl"]) for r in rows} == {("scale", "torch"), ("scale", "triton"),
                                                     ("broken", "torch"), ("broken", "triton")}
    with open(out / "results.csv", newline="") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == len(rows)
    for c, j in zip(csv_rows, rows):
        assert c["op"] == j["op"] and c["impl"] == j["impl"]
        assert (float(c["time_us"]) if c["time_us"] else None) == (j["time_us"] and pytest.approx(j["time_us"]))

    import matplotlib.image

    png = matplotlib.image.imread(out / "plot.png")
    assert png.ndim == 3 and png.shape[0] > 100 and png.shape[1] > 100
    # one line per impl, each over the three batches
    series = report.plot_series(rows, "time")
    assert list(series) == [("fake", "scale", "batch")]
    lines = series[("fake", "scale", "batch")]
    assert sorted(lines) == ["torch", "triton"]
    assert all([x for x, _ in pts] == [2, 8, 32] for pts in lines.values())
    captured = capsys.readouterr()
    assert "fake" in captured.out and "1 of 8 impl(s) raised" in captured.err


def test_list_and_peak_table(fake, capsys):
    assert cli_main(["bench", "fake", "--quick", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 3 and listed[0].startswith("fake.scale batch=1")
    assert cli_main(["bench", "--peak-table"]) == 0
    assert "H200" in capsys.readouterr().out


def test_progress_bar_in_a_log_is_one_line_per_step():
    stream = io.StringIO()
    bar = report.ProgressBar(4, stream=stream, width=8)
    for i in range(5):
        bar.update(i, f"case {i}")
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5
    assert lines[2].startswith("[####....] 2/4") and lines[4].startswith("[########] 4/4")


@pytest.mark.parametrize(
    "name, gbps",
    [("NVIDIA H200", 4800.0), ("NVIDIA H100 80GB HBM3", 3350.0), ("NVIDIA H100 PCIe", 2000.0),
     ("AMD Instinct MI300X", 5300.0), ("cpu", None), ("Kunlun P800", None)],
)
def test_peak_bandwidth_lookup(name, gbps):
    assert peak_bandwidth_gbps(name) == gbps
    assert peak_bandwidth_gbps(name, override=1234.0) == 1234.0


def test_zero_event_times_fall_back_to_the_wall_clock(monkeypatch):
    """Kunlun's events time to 0: never divide by them."""
    from kunlun_triton.runtime.capabilities import capabilities
    from kunlun_triton.runtime.target import Target

    cuda = Target("cuda", "sm_90", "cuda", "test")
    monkeypatch.setattr(timing, "current_target", lambda: cuda)
    monkeypatch.setattr(timing, "capabilities", lambda target=None: capabilities(cuda))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing, "_time_events", lambda fn, repeat: [0.0] * repeat)
    calls = []
    t = timing.time_call(lambda: calls.append(1), warmup=1, repeat=3)
    assert t.clock == "wall" and t.median_s > 0 and len(calls) == 4


def test_a_case_whose_inputs_fail_does_not_hide_the_others(monkeypatch):
    def no_inputs(shape, dtype, device):
        raise MemoryError("inputs too big")

    specs = [*fake_specs.SPECS[:1], fake_specs.OpSpec("greedy_op", "fake", no_inputs, (), lambda p, q: [{"n": 1}])]
    fake_specs.install(monkeypatch, specs)
    rows = bench.run_bench(bench.collect_cases(["fake"], "llama-3-8b", _args()), warmup=0, repeat=1)
    assert {r["op"] for r in rows if r.get("time_us")} == {"scale"}
    assert [r["error"] for r in rows if r["op"] == "greedy_op"] == ["MemoryError: inputs too big"]
