"""`doctor`, `bench` and `tune` given a bad command line or environment:
one line naming the flag or variable and a non-zero exit, nothing run.

Before the fix ``bench --repeat 0`` printed a table of StatisticsErrors and
exited 0, ``--shape rows=abc`` and ``--quick --shape hidden_size=...`` were
taken silently, and an invalid ``KUNLUN_TRITON_BACKEND`` came out as one
EnvError per op (exit 0 for bench, "WRONG" verdicts for doctor)."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fake_specs

from kunlun_triton.cli import build_parser
from kunlun_triton.cli import main as cli_main
from kunlun_triton.runtime import detect_target
from kunlun_triton.tools import doctor as doctor_module
from kunlun_triton.tools import tune


def _cli(*argv):
    """(exit status, stdout, stderr); argparse's own exits included."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(list(argv))
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def _refused(result, *names):
    rc, out, err = result
    assert rc == 2, (rc, out, err)
    assert "error: " in err, err  # ours ("error: ...") or argparse's ("prog: error: ...")
    for name in names:
        assert name in err, (name, err)
    assert "Traceback" not in err and "family  op" not in out  # no table of per-op exceptions


# ------------------------------------------------------------ counts


@settings(max_examples=40, deadline=None)
@given(command=st.sampled_from(["bench", "doctor", "tune"]), flag=st.sampled_from(["--repeat", "--warmup"]),
       value=st.one_of(st.integers(-5, 5).map(str), st.sampled_from(["2.5", "abc", "", "1e3", "0x3"])))
def test_counts_are_checked_by_the_parser(command, flag, value):
    if command == "doctor" and flag == "--warmup":
        flag = "--repeat"
    least = 1 if flag == "--repeat" else 0
    try:
        ok = int(value) >= least
    except ValueError:
        ok = False
    if command == "tune":
        parse = lambda: tune.build_parser().parse_args(["rms_norm", flag, value])  # noqa: E731
    else:
        parse = lambda: build_parser().parse_args([command, flag, value])  # noqa: E731
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        if ok:
            assert getattr(parse(), flag[2:]) == int(value)
            return
        with pytest.raises(SystemExit) as info:
            parse()
    assert info.value.code == 2 and flag in err.getvalue() and f"integer >= {least}" in err.getvalue()


def test_repeat_zero_runs_nothing(monkeypatch):
    fake_specs.install(monkeypatch, [s for s in fake_specs.SPECS if s.family == "fake"])
    _refused(_cli("bench", "fake", "--quick", "--repeat", "0"), "--repeat")
    _refused(_cli("bench", "fake", "--quick", "--warmup", "-1"), "--warmup")
    _refused(_cli("bench", "fake", "--quick", "--peak-gbps", "-3"), "--peak-gbps")
    _refused(_cli("doctor", "fake", "--repeat", "0"), "--repeat")


# ------------------------------------------------------------ --shape

# The fake family's shapes: scale {batch, hidden_size (from the preset, under
# --quick too)}, broken {n}. head_dim is a preset field neither reads.
USED = {"batch", "hidden_size", "n"}
KEYS = sorted(USED | {"head_dim", "rows", "tokens"})


@st.composite
def shape_flags(draw):
    """One --shape text, and whether it is valid for the fake family."""
    parts, ok = [], True
    for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True)):
        values = draw(st.lists(st.one_of(st.integers(-3, 40), st.floats(-2, 2, allow_nan=False),
                                         st.text("abcxyz", min_size=1, max_size=3)), min_size=1, max_size=3))
        ok = ok and key in USED and all(isinstance(v, int) and v >= 1 for v in values)
        parts.append(f"{key}=" + ",".join(repr(v) if isinstance(v, float) else str(v) for v in values))
    return ",".join(parts), ok


@settings(max_examples=40, deadline=None)
@given(flag=shape_flags())
def test_shape_overrides_are_checked(flag):
    text, ok = flag
    with pytest.MonkeyPatch.context() as mp:
        fake_specs.install(mp, [s for s in fake_specs.SPECS if s.family == "fake"])
        result = _cli("bench", "fake", "--quick", "--list", "--shape", text)
    if ok:
        assert result[0] == 0, result
    else:
        _refused(result, "--shape")


def test_quick_with_a_preset_field_it_never_reads():
    """The real specs: --quick benchmarks fixed small shapes, so a preset
    field there would be silently ignored."""
    _refused(_cli("bench", "norm", "--quick", "--list", "--shape", "hidden_size=1024"), "hidden_size", "--quick")
    _refused(_cli("tune", "rms_norm", "--quick", "--dry-run", "--shape", "hidden_size=1024"), "hidden_size")
    rc, out, _ = _cli("bench", "norm", "--list", "--shape", "hidden_size=1024")
    assert rc == 0 and "hidden_size=1024" in out  # without --quick the preset is read
    _refused(_cli("bench", "allocator", "--quick", "--list", "--shape", "page_size=0"), "page_size")
    _refused(_cli("bench", "norm", "--quick", "--list", "--shape", "rows=-3"), "rows")


def test_tune_refuses_a_key_no_config_lookup_tells_apart(tmp_path):
    """kv_dtype and custom_mask are in the attention ops' bench shapes, not in
    their config lookups: a config tuned on an fp8 pool would serve the bf16
    pool too, so tune refuses them (naming what configs are looked up by) and
    writes nothing; bench still measures them."""
    for argv, named in ((["store_kv", "--shape", "kv_dtype=fp8_e4m3"], ("kv_dtype", "row_width, tokens")),
                        (["attention", "--shape", "kv_dtype=fp8_e5m2"], ("kv_dtype", "decode_attention by head_dim")),
                        (["extend_attention", "--shape", "custom_mask=true"], ("custom_mask", "head_dim, group"))):
        _refused(_cli("tune", *argv, "--quick", "--output-dir", str(tmp_path)), *named)
    assert not list(tmp_path.iterdir())
    rc, out, _ = _cli("bench", "store_kv", "--quick", "--list", "--shape", "kv_dtype=fp8_e4m3")
    assert rc == 0 and "fp8_e4m3" in out


# ------------------------------------------------------------ flags the mode ignores


@pytest.mark.parametrize("argv, named", [
    (["bench", "--peak-table", "--quick"], "--quick"),
    (["bench", "norm", "--peak-table"], "FAMILY/OP"),
    (["bench", "--peak-table", "--shape", "batch=1"], "--shape"),
    (["bench", "norm", "--quick", "--list", "--output", "somewhere"], "--output"),
    (["bench", "norm", "--quick", "--list", "--repeat", "3"], "--repeat"),
    (["bench", "norm", "--quick", "--metric", "time"], "--metric"),
    (["tune", "rms_norm", "--quick", "--dry-run", "--force"], "--force"),
])
def test_flags_the_mode_ignores_are_refused(argv, named):
    _refused(_cli(*argv), named)


# ------------------------------------------------------------ environment


@pytest.fixture
def fresh_target():
    detect_target.cache_clear()
    yield
    detect_target.cache_clear()


@pytest.mark.parametrize("env, named", [
    ({"KUNLUN_TRITON_TARGET": "nope"}, "KUNLUN_TRITON_TARGET='nope'"),
    ({"KUNLUN_TRITON_BACKEND": "nope"}, "KUNLUN_TRITON_BACKEND='nope'"),
    ({"KUNLUN_TRITON_TARGET": "cuda"}, "KUNLUN_TRITON_TARGET=cuda"),  # no cuda device here
    ({"KUNLUN_TRITON_TARGET": "kunlun"}, "KUNLUN_TRITON_TARGET=kunlun"),
    ({"KUNLUN_TRITON_TARGET": "torch", "KUNLUN_TRITON_BACKEND": "triton"}, "KUNLUN_TRITON_BACKEND=triton"),
    ({"KUNLUN_TRITON_CHECK": "maybe"}, "KUNLUN_TRITON_CHECK"),
    ({"KUNLUN_TRITON_POOL_CHECKED": "2"}, "KUNLUN_TRITON_POOL_CHECKED"),
])
@pytest.mark.parametrize("argv", [["doctor", "norm"], ["bench", "norm", "--quick"],
                                  ["tune", "rms_norm", "--quick", "--dry-run"]])
def test_an_environment_the_tools_cannot_use_is_named(monkeypatch, fresh_target, env, named, argv):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _refused(_cli(*argv), named)


def test_doctor_does_not_say_all_on_the_triton_path_when_an_op_raised(monkeypatch, capsys):
    fake_specs.install(monkeypatch, [s for s in fake_specs.SPECS if s.name == "broken"])
    assert doctor_module.doctor(["broken"]) == 1
    out = capsys.readouterr().out
    assert "all on the Triton path" not in out and "raised before a result: broken" in out


def test_tune_exits_1_when_an_op_got_no_config(monkeypatch, tmp_path, capsys):
    """The other ops' configs are still written; before the fix this was a
    warning and exit status 0."""
    import yaml

    from kunlun_triton.ops.spec import OpSpec
    from kunlun_triton.runtime import current_target

    sleepy = next(s for s in fake_specs.SPECS if s.name == "sleepy_op")
    hopeless = OpSpec("hopeless_op", "sleepy", sleepy.make_case, (), lambda preset, quick: [{"n": 16}],
                      tune_candidates=lambda quick: [{"VARIANT": "broken"}])
    fake_specs.install(monkeypatch, [sleepy, hopeless])
    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", str(tmp_path))
    assert tune.main(["sleepy", "--output-dir", str(tmp_path), "--repeat", "1", "--warmup", "0"]) == 1
    assert "every candidate failed for hopeless_op" in capsys.readouterr().err
    t = current_target()
    written = yaml.safe_load((tmp_path / f"{t.name}-{t.arch}.yaml").read_text())
    assert set(written["ops"]) == {"sleepy_op"}


# ------------------------------------------------------------ issue 25: more one-line refusals


@pytest.mark.parametrize("extra,named", [
    (["--shape", "hidden_size=abc"], "hidden_size"),
    (["--shape", "hidden_size=-8"], "hidden_size"),
    (["--shape", "hidden_size=0"], "hidden_size"),
    (["--shape", "bogus=3"], "bogus"),
    (["--batch", str(10**15)], "--batch"),
    (["--target", "cuda:sm_1000"], "--target"),
    (["--target", "kunlun:p9000"], "--target"),
    (["--target", "cuda:"], "--target"),
])  # fmt: skip
def test_inspect_refuses_what_bench_refuses(extra, named):
    _refused(_cli("inspect", "rms_norm", "--no-compile", *extra), named)


@pytest.mark.parametrize("extra,named", [
    (["--shape", "q_heads=5,kv_heads=2"], "multiple of kv_heads"),
    (["--shape", "head_dim=0"], "head_dim"),
])  # fmt: skip
def test_inspect_refuses_heads_that_do_not_group(extra, named):
    _refused(_cli("inspect", "decode_attention", "--no-compile", *extra), named)


def test_inspect_moe_refuses_zero_experts():
    _refused(_cli("inspect", "moe_topk", "--no-compile", "--shape", "experts=0"), "experts")


def test_outputs_that_cannot_be_written_are_refused_before_running(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    _refused(_cli("bench", "norm", "--quick", "--output", str(a_file / "out")), "--output")
    _refused(_cli("tune", "rms_norm", "--quick", "--output-dir", str(a_file)), "--output-dir")
    _refused(_cli("inspect", "rms_norm", "--no-compile", "--json", str(tmp_path / "no" / "such" / "dir" / "r.json")), "--json")
    _refused(_cli("inspect", "rms_norm", "--no-compile", "--json", str(tmp_path)), "--json")
    assert a_file.read_text() == "" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_tune_force_over_a_corrupt_file_names_the_file_before_the_search(tmp_path, monkeypatch):
    from kunlun_triton.runtime import current_target

    path = tune.config_file(tmp_path, current_target())
    path.write_text("ops: {rms_norm: [\n")
    searched = []
    monkeypatch.setattr(tune, "tune_task", lambda *a: searched.append(a))
    _refused(_cli("tune", "rms_norm", "--quick", "--force", "--output-dir", str(tmp_path)), str(path))
    assert not searched and path.read_text() == "ops: {rms_norm: [\n"


def test_serve_with_a_missing_local_model_path_is_one_line():
    _refused(_cli("serve", "--model-path", "/nonexistent/model"), "/nonexistent/model")


def test_a_malformed_debug_flag_is_named_when_the_package_is_imported_by_the_cli():
    """KUNLUN_TRITON_DEBUG is read when the package's logger is set up (at
    import): a bad value gave a traceback from the import under bench."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, KUNLUN_TRITON_DEBUG="maybe")
    run = subprocess.run([sys.executable, "-m", "kunlun_triton.cli", "bench", "norm", "--quick", "--list"],
                         env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    _refused((run.returncode, run.stdout, run.stderr), "KUNLUN_TRITON_DEBUG")
