"""``kunlun-triton convert-weights --dequantize-mxfp4``: a gpt-oss MXFP4
checkpoint with its experts written as float tensors in ``--dtype``.

gpt-oss ships its experts as ``<prefix>_blocks`` uint8 [E, N, K / 32, 16]
(two e2m1 codes a byte, element 2j in the low nibble) and ``<prefix>_scales``
uint8 [E, N, K / 32] (e8m0), N the output rows. The float checkpoint holds
``<prefix>`` [E, K, N], HF transformers' layout for gpt-oss experts (what
its ``Mxfp4Config(dequantize=True)`` builds), decoded by
`kunlun_triton.ops.moe.dequantize_mxfp4`; config.json loses its
``quantization_config`` and an index its ``*_scales`` entries. For cards
where the float experts run faster than in-GEMM decoding (their bytes are
3.8x MXFP4's). Every blocks tensor must have its scales, of matching shape,
checked from the headers before anything is written.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint_files import ConvertError

BLOCKS, SCALES = "_blocks", "_scales"


def is_mxfp4(config: dict | None) -> bool:
    quant = (config or {}).get("quantization_config")
    return isinstance(quant, dict) and quant.get("quant_method") == "mxfp4"


class Mxfp4Dequantizer:
    """What ``--dequantize-mxfp4`` changes in a conversion (`convert_weights`)."""

    def __init__(self, safe_open, src: Path, names: dict, config: dict | None):
        """`names`: shard -> its tensor names (the conversion's plan)."""
        if not is_mxfp4(config):
            raise ConvertError(f"--dequantize-mxfp4: {src}/config.json has no quantization_config with "
                               "quant_method 'mxfp4'; nothing written")  # fmt: skip
        self.safe_open, self.src = safe_open, src
        self.shard_of = {name: shard for shard, shard_names in names.items() for name in shard_names}
        self.renamed: dict[str, str] = {}  # float tensor -> its shard
        blocks = [n for n in self.shard_of if n.endswith(BLOCKS)]
        if not blocks:
            raise ConvertError(f"--dequantize-mxfp4: {src} has no *{BLOCKS} tensors; nothing written")
        for name in blocks:
            self._check_pair(name)

    def _shape(self, name: str) -> list:
        with self.safe_open(self.src / self.shard_of[name], framework="pt") as handle:
            return list(handle.get_slice(name).get_shape())

    def _check_pair(self, blocks: str) -> None:
        scales = blocks[: -len(BLOCKS)] + SCALES
        if scales not in self.shard_of:
            raise ConvertError(f"--dequantize-mxfp4: {blocks} has no {scales}; nothing written")
        b, s = self._shape(blocks), self._shape(scales)
        if len(b) < 2 or b[-1] != 16 or b[:-1] != s:
            raise ConvertError(f"--dequantize-mxfp4: {blocks} {b} and {scales} {s} are not MXFP4 blocks "
                               "[..., N, K / 32, 16] with scales [..., N, K / 32]; nothing written")  # fmt: skip

    def owns(self, name: str) -> bool:
        pair = name[: -len(BLOCKS)] + SCALES if name.endswith(BLOCKS) else name[: -len(SCALES)] + BLOCKS
        return name.endswith((BLOCKS, SCALES)) and pair in self.shard_of

    def convert(self, shard: str, name: str, t: torch.Tensor, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The float tensor for a blocks tensor; nothing for its scales (read with the blocks)."""
        from ..ops.moe import dequantize_mxfp4

        if name.endswith(SCALES):
            return {}
        scales_name = name[: -len(BLOCKS)] + SCALES
        with self.safe_open(self.src / self.shard_of[scales_name], framework="pt") as handle:
            scales = handle.get_tensor(scales_name)
        weight = dequantize_mxfp4(t, scales, torch.float32).transpose(-1, -2).to(dtype).contiguous()
        self.renamed[name[: -len(BLOCKS)]] = shard
        return {name[: -len(BLOCKS)]: weight}

    def update_config(self, config: dict) -> dict:
        return {k: v for k, v in config.items() if k != "quantization_config"}

    def update_index(self, index: dict) -> dict:
        weight_map = {k: v for k, v in index["weight_map"].items() if not self.owns(k)}
        return {**index, "weight_map": {**weight_map, **self.renamed}}
