"""`kunlun-triton tune` over the real op specs, tiny searches under the
interpreter.

Oracles: the config format's own validator, and the runtime's lookup
(`get_config`) of what the tune printed; every candidate was checked against
the op's torch reference (`tools.checks.tune_tasks`), which the last tests
break on purpose."""

from __future__ import annotations

import types

import pytest
import torch
import yaml

from kunlun_triton.ops.spec import all_specs
from kunlun_triton.runtime import capabilities, clear_config_cache, current_target, get_config
from kunlun_triton.runtime.config import validate
from kunlun_triton.tools import checks, tune
from kunlun_triton.tools.presets import DEFAULT_PRESET, MODEL_PRESETS

# rms_norm is covered in test_tune.py; one sampling op stands for its family
OPS = ["silu_and_mul", "gelu_and_mul", "rotary_embedding", "store_kv", "decode_attention", "extend_attention",
       "sample", "fused_add_rms_norm", "logit_softcap"]  # fmt: skip
QUICK = ["--quick", "--dry-run", "--warmup", "0", "--repeat", "1"]


def _dry_run(op, tmp_path, monkeypatch, capsys):
    """main() with --dry-run: (the YAML it printed, tune()'s results)."""
    returned = []
    real = tune.tune
    monkeypatch.setattr(tune, "tune", lambda args: returned.append(real(args)) or returned[-1])
    assert tune.main([op, *QUICK, "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    document = yaml.safe_load(out[out.index("version: 1") :])
    return document, returned[0]["results"]


@pytest.mark.parametrize("op", OPS)
def test_quick_tune_writes_valid_rules_the_runtime_returns(op, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", str(tmp_path))
    document, results = _dry_run(op, tmp_path, monkeypatch, capsys)
    target = current_target()
    path = tmp_path / f"{target.name}-{target.arch}.yaml"
    assert not path.exists(), "--dry-run wrote a file"
    assert list(validate(document, "<dry run>")) == [op]
    assert document["ops"][op]["source"] == "tuned"
    for r in results:  # every quick candidate is a good one: none may fail its check
        assert r["winner"] is not None and all("error" not in t for t in r["trials"]), r["trials"]

    path.write_text(yaml.safe_dump(document))
    clear_config_cache()
    try:
        for r in results:
            found = get_config(op, **r["shape"])
            # tuned keys overlay the shipped ones: the winner's keys come back as tuned
            assert {k: found.get(k) for k in r["winner"]} == r["winner"], (r["shape"], found)
    finally:
        clear_config_cache()


class _CorruptingKernel:
    """A kernel whose launches with ROWS_PER_PROGRAM == rows add 1 to the output (its 2nd argument)."""

    def __init__(self, real, rows):
        self.real, self.rows = real, rows
        self.arg_names = real.arg_names  # launchers order constexprs by it (`ops.launch`)

    def run(self, *args, grid, warmup, **kwargs):  # launchers call kernel.run (`ops.launch`)
        self.real.run(*args, grid=grid, warmup=warmup, **kwargs)
        if {**dict(zip(self.arg_names, args)), **kwargs}["ROWS_PER_PROGRAM"] == self.rows:
            args[1].add_(1.0)


def test_a_candidate_computing_the_wrong_thing_is_rejected(tmp_path, monkeypatch, capsys):
    """silu_and_mul's quick search tries ROWS_PER_PROGRAM 1 and 16; with 16
    made wrong, 16 fails its check (even if it would be faster) and 1 wins."""
    from kunlun_triton.ops.activation import kernels
    from kunlun_triton.ops.activation import ops as activation_ops

    broken = types.SimpleNamespace(act_and_mul_kernel=_CorruptingKernel(kernels.act_and_mul_kernel, 16))
    monkeypatch.setattr(activation_ops, "kernels", broken)
    monkeypatch.setenv("KUNLUN_TRITON_CONFIG_DIR", str(tmp_path))
    document, results = _dry_run("silu_and_mul", tmp_path, monkeypatch, capsys)
    trials = {t["config"]["ROWS_PER_PROGRAM"]: t for t in results[0]["trials"]}
    assert trials[16]["time_us"] is None and "silu_and_mul with" in trials[16]["error"]
    assert trials[1]["time_us"] is not None
    assert document["ops"]["silu_and_mul"]["config"]["ROWS_PER_PROGRAM"] == 1


def test_an_op_whose_every_candidate_is_wrong_writes_nothing(tmp_path, monkeypatch, capsys):
    from kunlun_triton.ops.activation import reference

    monkeypatch.setattr(reference, "gelu_and_mul",
                        lambda x, approximate="none": torch.zeros(*x.shape[:-1], x.shape[-1] // 2, dtype=x.dtype))  # fmt: skip
    assert tune.main(["gelu_and_mul", *QUICK, "--output-dir", str(tmp_path)]) == 1
    assert "every candidate failed for gelu_and_mul" in capsys.readouterr().err


# The dims each op looks its config up by, from its spec (tests/ops/test_registry.py
# proves each launcher really looks up by these).
LOOKUP_DIMS = {name: set(spec.lookup_dims) for name, spec in all_specs().items()}


@pytest.mark.parametrize("has_dot", [True, False])
def test_full_search_spaces_are_sane(has_dot, monkeypatch):
    """Non-quick spaces (nothing launched, the op's dims read off a tiny case):
    every op offers several candidates, tasks name exactly the op's lookup
    dims, and attention tries formulations exactly where tl.dot works."""
    caps = capabilities()
    fake_caps = caps.__class__(**{**caps.__dict__, "has_dot": has_dot})
    monkeypatch.setattr("kunlun_triton.runtime.capabilities", lambda target=None: fake_caps)
    seen = set()
    for spec in all_specs().values():
        if spec.tune_candidates is None:
            continue
        seen.add(spec.name)
        candidates = [c for c in spec.tune_candidates(False)]
        assert 4 <= len(candidates) <= 64, (spec.name, len(candidates))
        forms = {c.get("formulation") for c in candidates}
        if spec.name.endswith("_attention") or spec.name in ("fused_experts", "int8_scaled_mm"):
            assert forms == ({"dot", "sum"} if has_dot else {None}), (spec.name, forms)
        else:
            assert forms == {None}
        shapes = (spec.tune_shapes or spec.bench_shapes)(MODEL_PRESETS[DEFAULT_PRESET], False)
        assert shapes, spec.name
    assert seen == set(LOOKUP_DIMS)
    quick = checks.tune_tasks(list(all_specs().values()), MODEL_PRESETS[DEFAULT_PRESET], True, {}, "cpu")
    assert {t.op for t in quick} == set(LOOKUP_DIMS)
    for task in quick:
        assert set(task.shape) == LOOKUP_DIMS[task.op], (task.op, task.shape)
