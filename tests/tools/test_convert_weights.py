"""`kunlun-triton convert-weights` on small checkpoints built here.

The oracle is torch's own cast of the source tensors, read back through
safetensors, and the files as written by hand."""

from __future__ import annotations

import json
import sys

import pytest
import safetensors.torch as safetensors_torch
import torch

from kunlun_triton.cli import main as cli_main
from kunlun_triton.tools import convert_weights

FP16_MAX = 65504.0


def _tensors():
    g = torch.Generator().manual_seed(0)
    big = torch.randn(4, 8, generator=g)
    big[1, 2], big[3, 0] = 1.0e6, -3.0e5  # beyond fp16
    big[0, 0] = float("inf")  # already inf: not an overflow of the conversion
    shard1 = {
        "model.embed_tokens.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "model.layers.0.mlp.weight": big,
        "model.position_ids": torch.arange(8, dtype=torch.int64),
        "model.layers.0.q_proj.weight_fp8": torch.randn(4, 4, generator=g).to(torch.float8_e4m3fn),
    }
    shard2 = {
        "lm_head.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.ones(8, dtype=torch.float64),
        "model.mask": torch.tensor([True, False]),
    }
    return shard1, shard2


def _write_checkpoint(root, sharded=True):
    root.mkdir()
    shard1, shard2 = _tensors()
    if sharded:
        names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
        for name, tensors in zip(names, (shard1, shard2)):
            safetensors_torch.save_file(tensors, str(root / name), metadata={"format": "pt"})
        weight_map = {k: names[0] for k in shard1} | {k: names[1] for k in shard2}
        (root / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map})
        )
    else:
        safetensors_torch.save_file({**shard1, **shard2}, str(root / "model.safetensors"))
    config = {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "hidden_size": 8,
              "text_config": {"torch_dtype": "bfloat16", "vocab_size": 16}}
    (root / "config.json").write_text(json.dumps(config))
    (root / "tokenizer.json").write_text('{"model": {"type": "BPE"}}')
    (root / "tokenizer_config.json").write_text('{"bos_token": "<s>"}')
    (root / "generation_config.json").write_text('{"temperature": 0.6}')
    (root / "pytorch_model.bin").write_bytes(b"pickled, never copied")
    (root / "original").mkdir()
    return {**shard1, **shard2}


def _read_all(directory):
    out = {}
    for path in sorted(directory.glob("*.safetensors")):
        out.update(safetensors_torch.load_file(str(path)))
    return out


def _expected(name, t, on_overflow="clamp"):
    if t.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        if on_overflow == "clamp":
            finite = torch.isfinite(t)
            t = torch.where(finite, t.double().clamp(-FP16_MAX, FP16_MAX), t.double())
        return t.to(torch.float16)
    return t


@pytest.mark.parametrize("sharded", [True, False])
def test_converts_floats_keeps_the_rest(tmp_path, sharded, capsys):
    source = _write_checkpoint(tmp_path / "src", sharded)
    before = {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir() if p.is_file()}
    rc = cli_main(["convert-weights", "--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "out"),
                   "--dtype", "fp16", "--quiet"])
    assert rc == 0
    converted = _read_all(tmp_path / "out")
    assert sorted(converted) == sorted(source)
    for name, t in source.items():
        want = _expected(name, t)
        assert converted[name].dtype == want.dtype, name
        assert torch.equal(converted[name].view(torch.uint8), want.view(torch.uint8)) if want.dtype == torch.float8_e4m3fn \
            else torch.equal(converted[name], want), name
    assert converted["model.layers.0.mlp.weight"][1, 2] == FP16_MAX
    assert converted["model.layers.0.mlp.weight"][0, 0] == float("inf")
    out = capsys.readouterr().out
    assert "overflow: model.layers.0.mlp.weight: 2 values" in out

    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["torch_dtype"] == config["dtype"] == "float16"
    assert config["text_config"] == {"torch_dtype": "float16", "vocab_size": 16}
    assert config["architectures"] == ["LlamaForCausalLM"]
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (tmp_path / "out" / name).read_bytes() == before[name]
    assert not (tmp_path / "out" / "pytorch_model.bin").exists()
    if sharded:
        index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
        source_index = json.loads(before["model.safetensors.index.json"])
        assert index["weight_map"] == source_index["weight_map"]
        assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in converted.values())
    # the source is untouched
    assert {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir() if p.is_file()} == before


def test_refuse_on_overflow_writes_nothing(tmp_path, capsys):
    _write_checkpoint(tmp_path / "src")
    rc = convert_weights.main(["--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "out"),
                               "--on-overflow", "refuse", "--quiet"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "model.layers.0.mlp.weight" in err and "nothing written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no output, no partial dir


def test_refuses_existing_output_and_the_source_dir(tmp_path, capsys):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "taken").mkdir()
    args = ["--model-path", str(tmp_path / "src"), "--quiet", "--output"]
    assert convert_weights.main(args + [str(tmp_path / "taken")]) == 1
    assert "already exists" in capsys.readouterr().err
    assert list((tmp_path / "taken").iterdir()) == []
    assert convert_weights.main(args + [str(tmp_path / "src")]) == 1
    assert convert_weights.main(args + [str(tmp_path / "src" / "fp16")]) == 1
    assert "inside the source" in capsys.readouterr().err
    assert not (tmp_path / "src" / "fp16").exists()


def test_missing_shard_and_empty_dir_are_clear_errors(tmp_path, capsys):
    _write_checkpoint(tmp_path / "src")
    (tmp_path / "src" / "model-00002-of-00002.safetensors").unlink()
    assert convert_weights.main(["--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "o1")]) == 1
    assert "model-00002-of-00002.safetensors" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert convert_weights.main(["--model-path", str(tmp_path / "empty"), "--output", str(tmp_path / "o2")]) == 1
    assert "no *.safetensors" in capsys.readouterr().err


def test_without_safetensors_the_error_says_what_to_install(tmp_path, monkeypatch, capsys):
    _write_checkpoint(tmp_path / "src")
    for mod in [m for m in sys.modules if m == "safetensors" or m.startswith("safetensors.")]:
        monkeypatch.setitem(sys.modules, mod, None)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    assert convert_weights.main(["--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "out")]) == 1
    assert "pip install safetensors" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
