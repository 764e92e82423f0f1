"""`convert-weights --dequantize-mxfp4` on a small gpt-oss-style MXFP4 checkpoint
built here (random bytes and exponents, the blocks and scales of one expert
tensor in different shards). The oracle decodes each nibble through the e2m1
table written out below (the OCP MX spec's values) and each scale as 2^(e - 127),
in float64, then HF's [E, K, N] layout; bad sources and flag combinations leave
nothing written."""

from __future__ import annotations

import json

import pytest
import safetensors.torch as safetensors_torch
import torch

from kunlun_triton.cli import main as cli_main

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
E, N, K = 2, 8, 64
PROJ = "model.layers.0.mlp.experts.gate_up_proj"


def oracle(blocks, scales):
    """[E, N, K / 32, 16] bytes + [E, N, K / 32] e8m0 -> float64 [E, K, N]."""
    table = torch.tensor(E2M1, dtype=torch.float64)
    lo, hi = table[(blocks & 15).long()], table[(blocks >> 4).long()]
    values = torch.stack([lo, hi], -1).reshape(*blocks.shape[:-1], 32)  # element 2j, 2j + 1
    values = values * torch.exp2(scales.double() - 127)[..., None]
    return values.reshape(E, N, K).transpose(1, 2)


def _write(root, scales_in_other_shard=True):
    g = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (E, N, K // 32, 16), generator=g, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(110, 135, (E, N, K // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    other = {"model.embed_tokens.weight": torch.randn(16, 8, generator=g),
             "model.layers.0.mlp.experts.gate_up_proj_bias": torch.randn(E, N, generator=g).to(torch.bfloat16),
             "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=g)}  # fmt: skip
    shard1 = {f"{PROJ}_blocks": blocks, **other}
    shard2 = {f"{PROJ}_scales": scales}
    if not scales_in_other_shard:
        shard1, shard2 = {**shard1, **shard2}, {"lm_head.weight": torch.randn(16, 8, generator=g)}
    root.mkdir()
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    for name, tensors in zip(names, (shard1, shard2)):
        safetensors_torch.save_file(tensors, str(root / name), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: names[0] for k in shard1} | {k: names[1] for k in shard2}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    config = {"architectures": ["GptOssForCausalLM"], "torch_dtype": "bfloat16",
              "quantization_config": {"quant_method": "mxfp4"}}  # fmt: skip
    (root / "config.json").write_text(json.dumps(config))
    return blocks, scales, other


def _load(out):
    tensors = {}
    for f in sorted(out.glob("*.safetensors")):
        tensors.update(safetensors_torch.load_file(str(f)))
    return tensors


@pytest.mark.parametrize("dtype,torch_dtype", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_experts_are_written_as_floats_in_hf_layout(tmp_path, dtype, torch_dtype):
    blocks, scales, other = _write(tmp_path / "src")
    out = tmp_path / "out"
    assert cli_main(["convert-weights", "--model-path", str(tmp_path / "src"), "--output", str(out),
                     "--dtype", dtype, "--dequantize-mxfp4", "--quiet"]) == 0  # fmt: skip
    tensors = _load(out)
    assert f"{PROJ}_blocks" not in tensors and f"{PROJ}_scales" not in tensors
    expected = oracle(blocks, scales)
    assert tensors[PROJ].dtype == torch_dtype and tensors[PROJ].shape == (E, K, N)
    assert torch.equal(tensors[PROJ].double(), expected.to(torch_dtype).double())  # MXFP4 values are exact in bf16
    assert torch.equal(tensors["model.embed_tokens.weight"], other["model.embed_tokens.weight"].to(torch_dtype))
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["torch_dtype"] == {"bf16": "bfloat16"}.get(dtype, "float32")
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(weight_map) == set(tensors) and weight_map[PROJ] == "model-00001-of-00002.safetensors"


def test_experts_are_written_as_w8a8_int8_per_output_column(tmp_path):
    """MXFP4 -> W8A8-INT8: int8 in HF's [E, K, N] layout with fp32 scales
    [E, 1, N]; each column's scale is its max |w| / 127 and q * scale is
    within half a step of the decoded weight (the oracle's float64 values)."""
    blocks, scales, _ = _write(tmp_path / "src")
    out = tmp_path / "out"
    assert cli_main(["convert-weights", "--model-path", str(tmp_path / "src"), "--output", str(out),
                     "--dtype", "bf16", "--dequantize-mxfp4", "--quantize", "w8a8-int8", "--quiet"]) == 0  # fmt: skip
    tensors = _load(out)
    q, scale, expected = tensors[PROJ], tensors[f"{PROJ}_scale"], oracle(blocks, scales)
    assert q.dtype == torch.int8 and q.shape == (E, K, N) and scale.dtype == torch.float32
    assert scale.shape == (E, 1, N)
    column_max = expected.abs().amax(dim=1, keepdim=True)
    assert torch.allclose(scale.double(), column_max / 127, rtol=1e-6)
    assert (q.double() * scale.double() - expected).abs().le(scale.double() / 2 * (1 + 1e-5)).all()
    assert q.abs().max() == 127
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "w8a8_int8"
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(weight_map) == set(tensors) and f"{PROJ}_scales" not in weight_map
    bias, attention = "model.layers.0.mlp.experts.gate_up_proj_bias", "model.layers.0.self_attn.q_proj.weight"
    assert tensors[bias].dtype == torch.bfloat16  # biases stay floats
    # SGLang builds gpt-oss's attention unquantized: its weights stay floats, without scales
    assert tensors[attention].dtype == torch.bfloat16 and f"{attention}_scale" not in tensors


@pytest.mark.parametrize("change,args,needle", [
    ("no_quant_config", [], "no quantization_config with quant_method 'mxfp4'"),
    ("no_scales", [], "has no model.layers.0.mlp.experts.gate_up_proj_scales"),
    ("bad_shape", [], "are not MXFP4 blocks"),
    ("bad_shape", ["--quantize", "w8a8-int8"], "are not MXFP4 blocks"),
])  # fmt: skip
def test_bad_sources_and_flags_write_nothing(tmp_path, capsys, change, args, needle):
    src = tmp_path / "src"
    _write(src, scales_in_other_shard=False)
    tensors = safetensors_torch.load_file(str(src / "model-00001-of-00002.safetensors"))
    if change == "no_quant_config":
        (src / "config.json").write_text(json.dumps({"architectures": ["GptOssForCausalLM"]}))
    elif change == "no_scales":
        tensors.pop(f"{PROJ}_scales")
    elif change == "bad_shape":
        tensors[f"{PROJ}_scales"] = tensors[f"{PROJ}_scales"][:, :4].contiguous()
    if change in ("no_scales", "bad_shape"):
        safetensors_torch.save_file(tensors, str(src / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
        index = json.loads((src / "model.safetensors.index.json").read_text())
        index["weight_map"] = {k: v for k, v in index["weight_map"].items() if k in tensors or "lm_head" in k}
        (src / "model.safetensors.index.json").write_text(json.dumps(index))
    out = tmp_path / "out"
    assert cli_main(["convert-weights", "--model-path", str(src), "--output", str(out), "--dequantize-mxfp4",
                     "--quiet", *args]) == 1  # fmt: skip
    assert needle in capsys.readouterr().err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_gguf_sources_refuse_the_checkpoint_only_flags(tmp_path, capsys):
    for flag in (["--dequantize-mxfp4"], ["--quantize", "w8a8-int8"]):
        assert cli_main(["convert-weights", "--from-gguf", str(tmp_path / "x.gguf"), "--output",
                         str(tmp_path / "out"), *flag]) == 1  # fmt: skip
        assert "applies to --model-path checkpoints" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
