"""`kunlun-triton doctor`: every op spec checked, non-zero exit on a wrong op."""

import torch

import fake_specs

from kunlun_triton import cli
from kunlun_triton.ops.spec import OpCase, OpSpec, all_specs
from kunlun_triton.tools import doctor as doctor_module


def _spec(run, reference):
    def make_case(shape, dtype, device):
        x = torch.arange(6, dtype=torch.float32, device=device)
        return OpCase(run=lambda config: run(x), reference=lambda: reference(x), dims={})

    return OpSpec("fake_op", "fake", make_case, (({}, torch.float32),), lambda preset, quick: [])


def test_doctor_exit_status_follows_correctness(monkeypatch, capsys):
    fake_specs.install(monkeypatch, [_spec(lambda x: x * 2, lambda x: x + x)])
    assert doctor_module.doctor(["fake"]) == 0
    assert "fake_op" in capsys.readouterr().out

    fake_specs.install(monkeypatch, [_spec(lambda x: x * 2, lambda x: x * 3)])
    assert doctor_module.doctor(["fake"]) == 1
    assert "WRONG: fake_op" in capsys.readouterr().out


def test_doctor_reports_an_op_that_raises(monkeypatch, capsys):
    def broken(x):
        raise RuntimeError("kernel exploded")

    fake_specs.install(monkeypatch, [_spec(broken, lambda x: x)])
    assert doctor_module.doctor(["fake_op"]) == 1
    assert "kernel exploded" in capsys.readouterr().out


def test_every_op_has_a_doctor_input():
    specs = all_specs()
    assert {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding", "store_kv",
            "decode_attention", "extend_attention", "sample", "greedy"} <= set(specs)  # fmt: skip
    for name, spec in specs.items():
        assert spec.doctor, f"{name} has no doctor input"


def test_unknown_family_is_an_error(capsys):
    assert cli.main(["doctor", "nope"]) == 2
    assert "unknown op family or op ['nope']" in capsys.readouterr().err


def test_doctor_all_ops_right_and_on_the_triton_path(capsys):
    """The main job on this machine: every op on the Triton path (interpreter
    on CPU), each matching its reference."""
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "all on the Triton path" in out, out
    for op in all_specs():
        assert op in out, op
