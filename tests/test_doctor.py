"""`kunlun-triton doctor`: every op family checked, non-zero exit on a wrong op."""

import types

import torch

from kunlun_triton import cli
from kunlun_triton.tools import doctor as doctor_module
from kunlun_triton.tools.checks import OpCheck
from kunlun_triton.tools.families import family_modules


def _fake_family(run, reference):
    def doctor_checks(device):
        x = torch.arange(6, dtype=torch.float32, device=device)
        return [OpCheck("fake_op", lambda: run(x), lambda: reference(x), torch.float32)]

    return types.SimpleNamespace(doctor_checks=doctor_checks)


def test_doctor_exit_status_follows_correctness(monkeypatch, capsys):
    monkeypatch.setattr(doctor_module, "family_modules", lambda: {"fake": _fake_family(lambda x: x * 2, lambda x: x + x)})
    assert doctor_module.doctor() == 0
    assert "fake_op" in capsys.readouterr().out

    monkeypatch.setattr(doctor_module, "family_modules", lambda: {"fake": _fake_family(lambda x: x * 2, lambda x: x * 3)})
    assert doctor_module.doctor() == 1
    assert "WRONG: fake_op" in capsys.readouterr().out


def test_doctor_reports_an_op_that_raises(monkeypatch, capsys):
    def broken(x):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(doctor_module, "family_modules", lambda: {"fake": _fake_family(broken, lambda x: x)})
    assert doctor_module.doctor() == 1
    assert "kernel exploded" in capsys.readouterr().out


def test_every_family_offers_doctor_checks_and_bench_cases():
    modules = family_modules()
    assert {"norm", "activation", "rope", "attention", "sampling"} <= set(modules)
    for name, module in modules.items():
        assert callable(module.doctor_checks) and callable(module.bench_cases), name


def test_doctor_all_ops_right_and_on_the_triton_path(capsys):
    """The main job on this machine: every op on the Triton path (interpreter
    on CPU), each matching its reference."""
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "all on the Triton path" in out, out
    for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "store_kv",
               "decode_attention", "extend_attention", "sample"):
        assert op in out, op
