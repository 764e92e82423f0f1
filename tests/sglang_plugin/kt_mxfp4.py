"""gpt-oss's MXFP4 checkpoint layout, written from a float checkpoint (the
tests' quantizer; imported by name: tests/ is not a package).

Each expert weight, as the output rows x input columns matrix [N, K], is
stored as gpt-oss stores it: ``*_blocks`` uint8 [E, N, K / 32, 16] (two e2m1
codes per byte, element 2j in the low nibble, 2j + 1 in the high one) and
``*_scales`` uint8 [E, N, K / 32] (e8m0: the group's power of two + 127).
A group's scale is the smallest power of two that brings its largest
magnitude to 6 (e2m1's largest) or below; each value rounds to the nearest
e2m1 magnitude (ties to the smaller code), its sign in bit 3."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
MODULES_NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., N, K] float -> (blocks uint8 [..., N, K / 32, 16], scales uint8 [..., N, K / 32])."""
    *lead, n, k = w.shape
    assert k % 32 == 0, k
    groups = w.double().reshape(*lead, n, k // 32, 32)
    amax = groups.abs().amax(-1)
    exponent = torch.ceil(torch.log2(torch.where(amax > 0, amax / 6.0, 2.0**-127))).clamp(-127, 127)
    scaled = groups / torch.exp2(exponent)[..., None]
    magnitude = (scaled.abs()[..., None] - E2M1.double()).abs().argmin(-1)
    codes = (magnitude | ((scaled < 0) & (magnitude > 0)).long() << 3).to(torch.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.contiguous(), (exponent + 127).to(torch.uint8).contiguous()


def write_mxfp4_checkpoint(float_dir, out_dir) -> Path:
    """`float_dir`'s gpt-oss checkpoint with its experts in MXFP4 (gpt-oss's layout and
    quantization_config) and their biases in bf16, as gpt-oss ships them."""
    from safetensors.torch import load_file, save_file

    src, out = Path(float_dir), Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    tensors = load_file(str(src / "model.safetensors"))
    quantized = {}
    for name, t in tensors.items():
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            blocks, scales = quantize_mxfp4(t.transpose(-1, -2))  # HF keeps [E, K, N]
            quantized[f"{name}_blocks"], quantized[f"{name}_scales"] = blocks, scales
        elif name.endswith(("gate_up_proj_bias", "down_proj_bias")):
            quantized[name] = t.to(torch.bfloat16)
        else:
            quantized[name] = t
    save_file(quantized, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": MODULES_NOT_CONVERTED}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
