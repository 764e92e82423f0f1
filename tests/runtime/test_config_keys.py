"""Config files are checked against what each op's kernels take (`OpSpec.config_keys`).

A bad value raises `ConfigError` naming file, op and key when the file is
read; an unknown key or op, or a KUNLUN_TRITON_CONFIG_DIR that does not
exist, is warned about once; lookups after the first never re-check.
"""

import logging
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given
from hypothesis import strategies as st

from strategies import DEVICE

import kunlun_triton.ops as ops
from kunlun_triton.ops import spec as op_spec
from kunlun_triton.runtime import config, config_keys
from kunlun_triton.runtime.config import ConfigError, clear_config_cache, shipped_config_dir
from kunlun_triton.runtime.config_keys import TILE
from kunlun_triton.runtime.target import current_target

RULES = op_spec.config_key_rules()
# (op, key) pairs whose value must be a power of two (tl.arange extents, warps)
TILE_KEYS = sorted((op, key) for op, keys in RULES.items() if keys for key, rule in keys.items() if rule is TILE)


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def warnings_logged():
    handler = _Warnings()
    config_keys.logger.addHandler(handler)
    yield handler.messages
    config_keys.logger.removeHandler(handler)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", str(tmp_path))
    clear_config_cache()
    yield tmp_path
    monkeypatch.delenv("KUNLUN_TRITON_CONFIG_DIR")
    clear_config_cache()


def _file(op, key, value) -> dict:
    return {"version": 1, "ops": {op: {"config": {key: value}}}}


def test_every_tile_key_of_every_op_is_declared():
    """The ops whose configs the shipped files set all declare their keys
    (sampling's are its own family's to declare)."""
    declared = {op for op, keys in RULES.items() if keys is not None}
    assert {"rms_norm", "silu_and_mul", "rotary_embedding", "store_kv", "decode_attention", "extend_attention",
            "moe_topk", "fused_experts"} <= declared  # fmt: skip
    assert ("extend_attention", "BLOCK_M") in TILE_KEYS and ("fused_experts", "DOWN_BLOCK_K") in TILE_KEYS


@pytest.mark.parametrize("path", sorted(shipped_config_dir().glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_files_validate_clean(path, warnings_logged):
    ops_found = config.validate(yaml.safe_load(path.read_text()), path, RULES)
    assert ops_found
    assert warnings_logged == []


NOT_A_POWER_OF_TWO = st.integers(3, 1 << 20).filter(lambda n: n & (n - 1))
BAD_TILES = st.one_of(
    st.integers(-(1 << 20), 0),
    NOT_A_POWER_OF_TWO,
    st.floats(),  # YAML 16.0 or 1e3 is a float: a kernel constexpr must be an int
    st.sampled_from([16.0, True, False, "16", "sixteen"]),
)


@given(op_key=st.sampled_from(TILE_KEYS), value=BAD_TILES)
def test_bad_tile_raises_naming_file_op_and_key(op_key, value):
    op, key = op_key
    path = Path("/somewhere/my-tuned.yaml")
    with pytest.raises(ConfigError) as raised:
        config.validate(_file(op, key, value), path, RULES)
    message = str(raised.value)
    assert str(path) in message and f"ops.{op}.config.{key}" in message and "power of two" in message


@given(
    op_key=st.sampled_from(sorted((op, k) for op, keys in RULES.items() if keys for k, r in keys.items()
                                  if r.expected == "an integer >= 1")),  # fmt: skip
    value=st.one_of(st.integers(-1000, 0), st.sampled_from([1.5, 4.0, True, "4"])),
)
def test_bad_count_raises(op_key, value):
    op, key = op_key
    with pytest.raises(ConfigError, match=f"ops.{op}.config.{key}"):
        config.validate(_file(op, key, value), "f.yaml", RULES)


@pytest.mark.parametrize("op", ["decode_attention", "extend_attention", "fused_experts"])
@pytest.mark.parametrize("value", ["tensor_core", "DOT", 1])
def test_unknown_formulation_raises(op, value):
    with pytest.raises(ConfigError, match=f"ops.{op}.config.formulation"):
        config.validate(_file(op, "formulation", value), "f.yaml", RULES)


def test_bad_value_in_a_shape_rule_raises():
    data = {"ops": {"rms_norm": {"by_shape": [{"when": {"hidden_size_max": 64}, "config": {"ROWS_PER_PROGRAM": 6}}]}}}
    with pytest.raises(ConfigError, match=r"ops\.rms_norm\.by_shape\[0\]\.config\.ROWS_PER_PROGRAM"):
        config.validate(data, "f.yaml", RULES)


def test_good_values_pass():
    config.validate(_file("fused_experts", "BLOCK_K", 128), "f.yaml", RULES)
    config.validate(_file("decode_attention", "PROGRAMS_PER_UNIT", 6), "f.yaml", RULES)  # counts need not be 2^n
    config.validate(_file("rms_norm", "num_warps", 8), "f.yaml", RULES)


def _most_specific(user_dir) -> Path:
    return user_dir / config.config_file_names(current_target())[0]


def test_unknown_key_and_op_warn_once(user_dir, warnings_logged):
    _most_specific(user_dir).write_text(textwrap.dedent("""\
        ops:
          rms_norm: {config: {ROWS_PER_PROGRAM: 2, BLOCK_ROWS: 4}}
          rms_nrom: {config: {ROWS_PER_PROGRAM: 2}}
        """))
    for _ in range(3):
        assert op_spec.lookup_config("rms_norm", hidden_size=64)["ROWS_PER_PROGRAM"] == 2
        clear_config_cache()  # re-read the file: still one warning each
    assert len(warnings_logged) == 2, warnings_logged
    assert any("rms_norm.config.BLOCK_ROWS" in m and "no such key" in m for m in warnings_logged)
    assert any("ops.rms_nrom" in m and "no op of that name" in m for m in warnings_logged)


def test_missing_config_dir_warns_once(tmp_path, monkeypatch, warnings_logged):
    missing = tmp_path / "not-there"
    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", str(missing))
    try:
        for _ in range(3):
            op_spec.lookup_config("rms_norm", hidden_size=64)
            config._config_dirs.cache_clear()
        assert len(warnings_logged) == 1 and str(missing) in warnings_logged[0]
    finally:
        monkeypatch.delenv("KUNLUN_TRITON_CONFIG_DIR")
        config._config_dirs.cache_clear()
        clear_config_cache()


def test_an_op_under_a_bad_user_file_raises_before_writing(user_dir):
    (user_dir / "default.yaml").write_text("ops: {rms_norm: {config: {ROWS_PER_PROGRAM: -4}}}\n")
    x, w = torch.randn(3, 64, device=DEVICE), torch.ones(64, device=DEVICE)
    with pytest.raises(ConfigError, match=r"default\.yaml.*ops\.rms_norm\.config\.ROWS_PER_PROGRAM"):
        ops.rms_norm(x, w)


def test_a_file_is_checked_once_not_per_lookup(user_dir, monkeypatch):
    _most_specific(user_dir).write_text("ops: {rms_norm: {config: {ROWS_PER_PROGRAM: 2}}}\n")
    calls = []
    real = config.check_op_config
    monkeypatch.setattr(config, "check_op_config", lambda *a: calls.append(a[1]) or real(*a))
    for width in (64, 128, 256, 64):
        op_spec.lookup_config("rms_norm", hidden_size=width)
    checked = len(calls)
    for width in (64, 128, 256, 512):
        op_spec.lookup_config("rms_norm", hidden_size=width)
    assert checked and len(calls) == checked


# ---- issue 25: hostile files, tiles past Triton's limits, per-call config=


def _alias_bomb(levels=9) -> str:
    """Each anchor lists the previous one 9 times: 9**9 leaves once expanded."""
    lines = ["notes:", "  - &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nops: {{rms_norm: {{config: {{ROWS_PER_PROGRAM: *a{levels - 1}}}}}}}\n"


@pytest.mark.parametrize("kind", ["alias bomb", "deep nesting", "not UTF-8"])
def test_hostile_user_file_raises_config_error_naming_the_file(user_dir, kind):
    """An alias bomb was formatted whole into the message (~50 s, then
    MemoryError); 50,000-deep nesting raised RecursionError and bytes that
    are not UTF-8 UnicodeDecodeError, neither naming the file. Each is now a
    ConfigError naming the file, quickly, and nothing is written."""
    path = _most_specific(user_dir)
    if kind == "alias bomb":
        path.write_text(_alias_bomb())
    elif kind == "deep nesting":
        path.write_text("ops: " + "[" * 50_000 + "]" * 50_000 + "\n")
    else:
        path.write_bytes(b"ops: {rms_norm: {config: {ROWS_PER_PROGRAM: \xff\xfe}}}\n")
    x, w = torch.randn(3, 64, device=DEVICE), torch.ones(64, device=DEVICE)
    before = x.clone()
    with pytest.raises(ConfigError) as raised:
        ops.rms_norm(x, w)
    assert str(path) in str(raised.value) and len(str(raised.value)) < 1000
    assert torch.equal(x, before)


def test_an_unusable_config_dir_name_warns_and_the_shipped_configs_serve(monkeypatch, warnings_logged):
    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", "d" * 5000)  # OSError: File name too long
    clear_config_cache()
    try:
        assert op_spec.lookup_config("rms_norm", hidden_size=64)  # the shipped answer
        assert any("KUNLUN_TRITON_CONFIG_DIR" in m and "cannot be used" in m for m in warnings_logged)
    finally:
        monkeypatch.delenv("KUNLUN_TRITON_CONFIG_DIR")
        clear_config_cache()


HUGE_TILES = [("decode_attention", "BLOCK_N", 2**20), ("fused_experts", "BLOCK_M", 2**20),
              ("greedy", "BLOCK_V", 2**28), ("decode_attention", "BLOCK_N", 2**22)]  # fmt: skip


@pytest.mark.parametrize("op,key,value", HUGE_TILES)
def test_tiles_past_tritons_limits_are_refused_in_files(op, key, value):
    assert (op, key) in TILE_KEYS
    with pytest.raises(ConfigError, match=rf"my\.yaml: ops\.{op}\.config\.{key}: .*power of two"):
        config.validate(_file(op, key, value), Path("/x/my.yaml"), op_spec.CONFIG_RULES)


def _norm_call(cfg):
    x, w = torch.randn(3, 64, device=DEVICE), torch.ones(64, device=DEVICE)
    before = x.clone()
    return x, before, lambda: ops.rms_norm(x, w, config=cfg)


@pytest.mark.parametrize("cfg,error,words", [
    ([1], TypeError, "rms_norm: config must be a dict"),
    ({"ROWS_PER_PROGRAM": "x"}, ValueError, "rms_norm: config['ROWS_PER_PROGRAM'] must be a power of two"),
    ({"ROWS_PER_PROGRAM": 2**20}, ValueError, "rms_norm: config['ROWS_PER_PROGRAM'] must be a power of two"),
    ({1: 2}, TypeError, "rms_norm: config keys must be strings"),
])  # fmt: skip
def test_per_call_config_is_checked_like_a_file(cfg, error, words):
    x, before, call = _norm_call(cfg)
    with pytest.raises(error) as raised:
        call()
    assert words in str(raised.value)
    assert torch.equal(x, before)


def test_per_call_huge_tiles_name_op_and_key():
    logits = torch.randn(2, 300, device=DEVICE)
    with pytest.raises(ValueError, match=r"greedy: config\['BLOCK_V'\] must be a power of two from 1 to 65536"):
        ops.greedy(logits, config={"BLOCK_V": 2**28})
    with pytest.raises(ValueError, match=r"logit_softcap: config\['BLOCK_COLS'\]"):
        ops.logit_softcap(logits, 30.0, config={"BLOCK_COLS": 2**22})
