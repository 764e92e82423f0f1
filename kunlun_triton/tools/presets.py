"""Model shapes for benchmarks and peak bandwidths per device."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelPreset:
    name: str
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    num_layers: int
    rope_theta: float


MODEL_PRESETS = {
    p.name: p
    for p in (
        ModelPreset("llama-3-8b", 4096, 14336, 32, 8, 128, 128256, 32, 500000.0),
        ModelPreset("qwen2.5-7b", 3584, 18944, 28, 4, 128, 152064, 28, 1000000.0),
        ModelPreset("qwen2.5-14b", 5120, 13824, 40, 8, 128, 152064, 48, 1000000.0),
    )
}
DEFAULT_PRESET = "llama-3-8b"

# Peak HBM bandwidth in GB/s (vendor datasheets), matched by substring of the
# device name torch reports, most specific first.
PEAK_BANDWIDTH_GBPS = (
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("H800", 3350.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100", 1555.0),
    ("MI300X", 5300.0),
    # Kunlun P800: no public figure we trust yet; pass --peak-gbps.
)


def device_name() -> str:
    import torch

    from ..runtime import current_target

    target = current_target()
    if target.device_type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    if target.name == "kunlun":
        return "Kunlun " + target.arch.upper()
    return "cpu"


def peak_bandwidth_gbps(name: str | None = None, override: float | None = None) -> float | None:
    """The device's peak HBM bandwidth, or None when unknown (CPU, new cards)."""
    if override:
        return override
    name = device_name() if name is None else name
    for key, gbps in PEAK_BANDWIDTH_GBPS:
        if key.lower() in name.lower():
            return gbps
    return None
