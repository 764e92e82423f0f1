"""`kunlun-triton convert-weights --quantize w8a8-int8` on a small sharded
checkpoint built here: the decoder's linear weights become int8 + fp32
per-channel scales (checked against the definition: |q * scale - W| <=
scale / 2, |q| <= 127, the row's largest weight at +-127), everything else
is cast as without --quantize, the index and config.json say what SGLang
reads, and a failure part way leaves nothing."""

from __future__ import annotations

import json

import pytest
import safetensors.torch as safetensors_torch
import torch

from kunlun_triton.cli import main as cli_main
from kunlun_triton.tools import convert_weights, quantize_weights

LINEAR = ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
          "model.layers.1.mlp.experts.3.gate_proj.weight")  # fmt: skip
KEPT = ("model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "model.norm.weight", "lm_head.weight",
        "model.layers.1.mlp.gate.weight")  # fmt: skip


def _checkpoint(root):
    g = torch.Generator().manual_seed(0)
    shard1 = {LINEAR[0]: torch.randn(24, 16, generator=g), LINEAR[1]: torch.randn(16, 40, generator=g) * 1e-3,
              KEPT[0]: torch.randn(50, 16, generator=g), KEPT[1]: torch.ones(16)}  # fmt: skip
    shard1[LINEAR[0]][3] = 0  # an all-zero output channel
    shard2 = {LINEAR[2]: torch.randn(8, 16, generator=g), KEPT[2]: torch.ones(16), KEPT[3]: torch.randn(50, 16,
              generator=g), KEPT[4]: torch.randn(4, 16, generator=g)}  # fmt: skip
    root.mkdir()
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    for name, tensors in zip(names, (shard1, shard2)):
        safetensors_torch.save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()}, str(root / name))
    weight_map = {k: names[0] for k in shard1} | {k: names[1] for k in shard2}
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"}))
    return {**shard1, **shard2}, weight_map


def test_quantizes_the_decoder_linears_into_sglang_format(tmp_path):
    source, weight_map = _checkpoint(tmp_path / "src")
    out = tmp_path / "out"
    assert cli_main(["convert-weights", "--model-path", str(tmp_path / "src"), "--output", str(out), "--dtype", "fp16",
                     "--quantize", "w8a8-int8", "--quiet"]) == 0  # fmt: skip
    index = json.loads((out / "model.safetensors.index.json").read_text())
    written = {}
    for shard in set(index["weight_map"].values()):
        written.update(safetensors_torch.load_file(str(out / shard)))
    assert set(index["weight_map"]) == set(written) == set(source) | {n + "_scale" for n in LINEAR}
    for name in LINEAR:
        w = source[name].to(torch.bfloat16).float()
        q, scale = written[name], written[name + "_scale"]
        assert q.dtype == torch.int8 and q.shape == w.shape
        assert scale.dtype == torch.float32 and scale.shape == (w.shape[0], 1)
        assert index["weight_map"][name + "_scale"] == index["weight_map"][name]
        assert int(q.abs().max()) == 127 and int(q.int().min()) >= -127
        assert bool(((q.float() * scale - w).abs() <= scale * (0.5 + 1e-4)).all())  # (+ fp32 rounding)
        peak = w.abs().amax(1, keepdim=True)
        assert torch.equal(scale[peak[:, 0] > 0], (peak / 127)[peak[:, 0] > 0])
    for name in KEPT:
        assert written[name].dtype == torch.float16
        assert torch.equal(written[name], source[name].to(torch.bfloat16).to(torch.float16))
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "w8a8_int8" and config["torch_dtype"] == "float16"


def test_a_failure_part_way_leaves_nothing(tmp_path, monkeypatch):
    _checkpoint(tmp_path / "src")

    def broken(self, shard, name, t):
        raise OSError(28, "No space left on device", name)

    monkeypatch.setattr(quantize_weights.W8A8Int8, "quantize", broken)
    with pytest.raises(convert_weights.ConvertError, match="No space left"):
        convert_weights.convert(tmp_path / "src", tmp_path / "deep" / "out", quantize="w8a8-int8", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_unknown_method_is_refused_before_anything(tmp_path):
    _checkpoint(tmp_path / "src")
    with pytest.raises(convert_weights.ConvertError, match="--quantize 'int4'"):
        convert_weights.convert(tmp_path / "src", tmp_path / "out", quantize="int4", progress=False)
    assert not (tmp_path / "out").exists()


def _quantized(tmp_path):
    _checkpoint(tmp_path / "src")
    assert cli_main(["convert-weights", "--model-path", str(tmp_path / "src"), "--output", str(tmp_path / "w8"),
                     "--dtype", "bf16", "--quantize", "w8a8-int8", "--quiet"]) == 0  # fmt: skip
    return tmp_path / "w8"


def _tensors(path):
    index = json.loads((path / "model.safetensors.index.json").read_text())
    out = {}
    for shard in set(index["weight_map"].values()):
        out.update(safetensors_torch.load_file(str(path / shard)))
    return out


def test_quantizing_a_quantized_checkpoint_is_refused_naming_its_format(tmp_path, capsys):
    """Issue 39 item 6: it used to "quantize 0 linear weights" and rewrite the fp32 scales as fp16."""
    w8 = _quantized(tmp_path)
    capsys.readouterr()
    assert cli_main(["convert-weights", "--model-path", str(w8), "--output", str(tmp_path / "again"),
                     "--quantize", "w8a8-int8", "--quiet"]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "already quantized (quantization_config.quant_method 'w8a8_int8')" in err and "nothing written" in err
    assert not (tmp_path / "again").exists()
    # no quantization_config: found from the tensors themselves
    config = json.loads((w8 / "config.json").read_text())
    del config["quantization_config"]
    (w8 / "config.json").write_text(json.dumps(config))
    with pytest.raises(convert_weights.ConvertError, match=r"already quantized \(int8 weights with 3 scale tensors"):
        convert_weights.convert(w8, tmp_path / "again", quantize="w8a8-int8", progress=False)
    assert not (tmp_path / "again").exists()


def test_a_quantized_checkpoint_converts_with_weights_and_scales_unchanged(tmp_path, capsys):
    w8 = _quantized(tmp_path)
    before = _tensors(w8)
    capsys.readouterr()
    assert cli_main(["convert-weights", "--model-path", str(w8), "--output", str(tmp_path / "fp16"),
                     "--dtype", "fp16", "--quiet"]) == 0  # fmt: skip
    assert "already quantized (quantization_config.quant_method 'w8a8_int8')" in capsys.readouterr().out
    after = _tensors(tmp_path / "fp16")
    assert set(after) == set(before)
    for name in LINEAR:
        assert after[name].dtype == torch.int8 and torch.equal(after[name], before[name])
        scale = after[name + "_scale"]
        assert scale.dtype == torch.float32 and torch.equal(scale, before[name + "_scale"]), name
    for name in KEPT:
        assert after[name].dtype == torch.float16
    config = json.loads((tmp_path / "fp16" / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "w8a8_int8" and config["torch_dtype"] == "float16"
