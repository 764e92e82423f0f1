"""Target detection, capability profiles, dispatch and config lookup."""

import logging
import textwrap

import pytest
import torch

import kunlun_triton
from kunlun_triton.runtime import config, dispatch, target
from kunlun_triton.runtime.capabilities import capabilities, launch_options, run_dtype
from kunlun_triton.runtime.config import ConfigError, get_config


@pytest.fixture
def fresh_target(monkeypatch):
    """Re-detect under the test's environment, and again afterwards."""
    for var in ("KUNLUN_TRITON_TARGET", "KUNLUN_TRITON_ARCH", "KUNLUN_TRITON_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    target.detect_target.cache_clear()
    dispatch.reset_dispatch_report()
    yield monkeypatch
    target.detect_target.cache_clear()
    dispatch.reset_dispatch_report()


def _no_hardware(monkeypatch):
    monkeypatch.setattr(target, "_kunlun_present", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_forced_target_wins(fresh_target):
    fresh_target.setenv("KUNLUN_TRITON_TARGET", "kunlun")
    t = target.detect_target()
    assert (t.name, t.device_type, t.arch) == ("kunlun", "cuda", "p800")
    assert "KUNLUN_TRITON_TARGET" in t.reason


def test_forced_target_rejects_unknown_name(fresh_target):
    fresh_target.setenv("KUNLUN_TRITON_TARGET", "tpu")
    with pytest.raises(ValueError, match="tpu.*kunlun, cuda, hip, interpreter, torch"):
        target.detect_target()


def test_kunlun_detected_from_vendor_torch(fresh_target):
    real_find_spec = target.importlib.util.find_spec
    fresh_target.setattr(
        target.importlib.util, "find_spec", lambda n: object() if n == "torch_xmlir" else real_find_spec(n)
    )
    t = target.detect_target()
    assert (t.name, t.device_type) == ("kunlun", "cuda")
    assert "torch_xmlir" in t.reason


def test_interpreter_then_torch_fallback(fresh_target):
    _no_hardware(fresh_target)
    fresh_target.setenv("TRITON_INTERPRET", "1")
    assert target.detect_target().name == "interpreter"
    target.detect_target.cache_clear()
    fresh_target.delenv("TRITON_INTERPRET")
    t = target.detect_target()
    assert (t.name, t.is_triton, t.device_type) == ("torch", False, "cpu")


def test_device_count_follows_the_target(fresh_target):
    fresh_target.setenv("KUNLUN_TRITON_TARGET", "interpreter")
    assert kunlun_triton.current_target() is target.detect_target()
    assert kunlun_triton.device_count() == 1  # the host
    target.detect_target.cache_clear()
    fresh_target.setenv("KUNLUN_TRITON_TARGET", "cuda")
    fresh_target.setenv("KUNLUN_TRITON_ARCH", "sm_90")
    fresh_target.setattr(torch.cuda, "device_count", lambda: 8)
    assert kunlun_triton.device_count() == 8


def test_kunlun_profile_avoids_what_breaks_its_compiler():
    kunlun = target.Target("kunlun", "p800", "cuda", "test")
    caps = capabilities(kunlun)
    assert not caps.has_dot and not caps.has_atomics and not caps.num_warps_meaningful
    assert not caps.timing_events_reliable
    cfg = {"BLOCK": 64, "num_warps": 8, "isCloseUnrollControl": True, "buffer_size_limit": 2048}
    assert launch_options(cfg, kunlun) == {"isCloseUnrollControl": True, "buffer_size_limit": 2048}
    cuda = target.Target("cuda", "sm_90", "cuda", "test")
    assert launch_options(cfg, cuda) == {"num_warps": 8}
    assert run_dtype(torch.bfloat16, kunlun) == torch.float16
    assert run_dtype(torch.bfloat16, cuda) == torch.bfloat16


def test_dispatch_falls_back_once_with_one_warning(fresh_target, caplog):
    _no_hardware(fresh_target)
    fresh_target.delenv("TRITON_INTERPRET", raising=False)
    x = torch.zeros(2)
    with caplog.at_level(logging.WARNING, logger="kunlun_triton"):
        assert dispatch.use_triton("op_a", x) is False
        assert dispatch.use_triton("op_a", x) is False
    warnings = [r for r in caplog.records if "op_a" in r.getMessage()]
    assert len(warnings) == 1 and "torch reference" in warnings[0].getMessage()
    report = kunlun_triton.dispatch_report()["op_a"]
    assert report["impl"] == "torch" and report["calls"] == {"torch": 2}


def test_dispatch_triton_on_interpreter_but_not_for_foreign_device(fresh_target):
    _no_hardware(fresh_target)
    fresh_target.setenv("TRITON_INTERPRET", "1")
    assert dispatch.use_triton("op_b", torch.zeros(2)) is True
    assert kunlun_triton.dispatch_report()["op_b"]["impl"] == "triton"
    meta = torch.zeros(2, device="meta")
    assert dispatch.use_triton("op_b", meta) is False
    assert "meta" in kunlun_triton.dispatch_report()["op_b"]["reason"]


def test_forced_backend(fresh_target):
    _no_hardware(fresh_target)
    fresh_target.setenv("TRITON_INTERPRET", "1")
    fresh_target.setenv("KUNLUN_TRITON_BACKEND", "torch")
    assert dispatch.use_triton("op_c", torch.zeros(1)) is False
    fresh_target.setenv("KUNLUN_TRITON_BACKEND", "triton")
    with pytest.raises(dispatch.DispatchError, match="op_c.*meta"):
        dispatch.use_triton("op_c", torch.zeros(1, device="meta"))
    fresh_target.setenv("KUNLUN_TRITON_BACKEND", "fast")
    with pytest.raises(ValueError, match="KUNLUN_TRITON_BACKEND"):
        dispatch.use_triton("op_c", torch.zeros(1))


def test_debug_logs_every_decision(fresh_target, caplog):
    _no_hardware(fresh_target)
    fresh_target.setenv("TRITON_INTERPRET", "1")
    fresh_target.setenv("KUNLUN_TRITON_DEBUG", "1")
    with caplog.at_level(logging.DEBUG, logger="kunlun_triton"):
        dispatch.use_triton("op_d", torch.zeros(1))
        dispatch.use_triton("op_d", torch.zeros(1))
    assert sum("op_d -> triton" in r.getMessage() for r in caplog.records) == 2


# ---------------------------------------------------------------- configs

def _write(path, text):
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", str(tmp_path))
    return tmp_path


CUDA90 = target.Target("cuda", "sm_90", "cuda", "test")


def test_lookup_order_architecture_target_default(config_dir, monkeypatch):
    monkeypatch.setattr(config, "shipped_config_dir", lambda: config_dir / "none")
    _write(config_dir / "default.yaml", "ops: {op: {config: {A: 1, B: 1, C: 1}}}\n")
    _write(config_dir / "cuda.yaml", "ops: {op: {config: {B: 2, C: 2}}}\n")
    _write(config_dir / "cuda-sm_90.yaml", "ops: {op: {config: {C: 3}}}\n")
    assert get_config("op", CUDA90) == {"A": 1, "B": 2, "C": 3}
    hip = target.Target("hip", "gfx942", "cuda", "test")
    assert get_config("op", hip) == {"A": 1, "B": 1, "C": 1}
    assert get_config("other_op", CUDA90) == {}


def test_specific_file_beats_a_shape_rule_of_a_general_one(config_dir, monkeypatch):
    monkeypatch.setattr(config, "shipped_config_dir", lambda: config_dir / "none")
    _write(config_dir / "default.yaml", "ops: {op: {by_shape: [{when: {n_max: 9}, config: {A: 1, B: 1}}]}}\n")
    _write(config_dir / "cuda-sm_90.yaml", "ops: {op: {config: {A: 2}}}\n")
    assert get_config("op", CUDA90, n=5) == {"A": 2, "B": 1}


def test_by_shape_first_match_most_specific_file_first(config_dir, monkeypatch):
    monkeypatch.setattr(config, "shipped_config_dir", lambda: config_dir / "none")
    _write(
        config_dir / "default.yaml",
        """
        ops:
          op:
            config: {A: 1}
            by_shape:
              - when: {n_max: 100}
                config: {A: 10}
        """,
    )
    _write(
        config_dir / "cuda.yaml",
        """
        ops:
          op:
            by_shape:
              - when: {n_min: 50, n_max: 60}
                config: {A: 55}
        """,
    )
    assert get_config("op", CUDA90, n=55) == {"A": 55}
    assert get_config("op", CUDA90, n=70) == {"A": 10}
    assert get_config("op", CUDA90, n=700) == {"A": 1}


@pytest.mark.parametrize(
    "text, key",
    [
        ("ops: [1, 2]\n", "ops"),
        ("ops: {op: {config: {A: [1]}}}\n", "ops.op.config"),
        ("ops: {op: {confg: {A: 1}}}\n", "ops.op.confg"),
        ("ops: {op: {by_shape: [{when: {n: 3}, config: {}}]}}\n", "ops.op.by_shape[0].when"),
        ("ops: {op: {source: guessed}}\n", "ops.op.source"),
        ("version: 2\n", "version"),
        ("ops: {op: {config: {A: 1}\n", "<yaml>"),
    ],
)
def test_malformed_file_names_file_and_key(config_dir, text, key):
    _write(config_dir / "cuda.yaml", text)
    with pytest.raises(ConfigError) as err:
        get_config("op", CUDA90)
    assert "cuda.yaml" in str(err.value) and key in str(err.value) and "expected" in str(err.value)


def test_by_shape_on_unknown_dimension_is_an_error(config_dir):
    _write(config_dir / "cuda.yaml", "ops: {op: {by_shape: [{when: {rows_max: 3}, config: {A: 1}}]}}\n")
    with pytest.raises(ConfigError, match="rows_max"):
        get_config("op", CUDA90, n=1)


def test_shipped_configs_are_valid_and_name_only_real_ops():
    from kunlun_triton.ops.spec import all_specs

    shipped = config.shipped_config_dir()
    names = {p.name for p in shipped.glob("*.yaml")}
    assert {"default.yaml", "interpreter.yaml", "cuda-sm_90.yaml", "hip-gfx942.yaml", "kunlun-p800.yaml"} <= names
    ops = set(all_specs())
    for path in shipped.glob("*.yaml"):
        entries = config._load_file(path, path.stat().st_mtime)  # validates, or raises ConfigError
        assert set(entries) <= ops, (path.name, sorted(set(entries) - ops))
    assert set(config._load_file(shipped / "default.yaml", 0)) == ops, "default.yaml covers every op"
