"""Model shapes for benchmarks, command-line shape overrides, and peak
bandwidths per device.

Shapes reach an op spec's ``bench_shapes(preset, quick)`` two ways:

- the model preset (``--preset``), whose fields a ``--shape`` may replace
  (``--shape hidden_size=1024,2048`` benchmarks both widths: one preset each);
- any other ``--shape`` key replaces the values of that key in the spec's
  shapes (``--shape batch=1,8``; `checks.expand`).

``--shape`` takes ``key=v1,v2,...`` and may hold several keys
(``batch=1,8,context_len=512,4096``) or be repeated.
"""

from __future__ import annotations

import dataclasses
import itertools
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
    # mixture of experts (0: a dense model): routed experts, experts per token, expert MLP width
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0


MODEL_PRESETS = {
    p.name: p
    for p in (
        ModelPreset("llama-3-8b", 4096, 14336, 32, 8, 128, 128256, 32, 500000.0),
        ModelPreset("qwen2.5-7b", 3584, 18944, 28, 4, 128, 152064, 28, 1000000.0),
        ModelPreset("qwen2.5-14b", 5120, 13824, 40, 8, 128, 152064, 48, 1000000.0),
        ModelPreset("qwen3-30b-a3b", 2048, 6144, 32, 4, 128, 151936, 48, 1000000.0, 128, 8, 768),
        ModelPreset("mixtral-8x7b", 4096, 14336, 32, 8, 128, 32000, 32, 1000000.0, 8, 2, 14336),
        ModelPreset("qwen3-235b-a22b", 4096, 12288, 64, 4, 128, 151936, 94, 1000000.0, 128, 8, 1536),
        # MLA attention (kv_lora_rank 512, qk 128 + 64 rope dims): the head fields
        # are its v_head_dim and 16 heads, for the MoE and dense ops' shapes;
        # 64 routed experts (+2 shared, not routed), top-6
        ModelPreset("deepseek-v2-lite", 2048, 10944, 16, 16, 128, 102400, 27, 10000.0, 64, 6, 1408),
    )
}
DEFAULT_PRESET = "llama-3-8b"
PRESET_FIELDS = tuple(f.name for f in dataclasses.fields(ModelPreset) if f.name != "name")

# Peak HBM bandwidth in GB/s (vendor datasheets), matched by substring of the
# device name torch reports, most specific first.
PEAK_BANDWIDTH_GBPS = (
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("H800", 3350.0),
    ("H20", 4000.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100", 1555.0),
    ("MI300X", 5300.0),
    ("MI325X", 6000.0),
    # Kunlun P800: no public figure we trust yet; pass --peak-gbps.
)


# ---------------------------------------------------------------- overrides


def _scalar(text: str):
    """'8' -> 8, '1e-6' -> 1e-06, 'fp16' -> 'fp16'."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_shapes(specs) -> dict[str, list]:
    """``["batch=1,8,context_len=512", "dtype=fp16"]`` ->
    ``{"batch": [1, 8], "context_len": [512], "dtype": ["fp16"]}``.

    A token with ``=`` starts a key; tokens without one add values to it."""
    shapes: dict[str, list] = {}
    for spec in specs or ():
        key = None
        for token in (t.strip() for t in spec.split(",")):
            if not token:
                continue
            if "=" in token:
                key, _, token = token.partition("=")
                key = key.strip()
                if not key or not token.strip():
                    raise ValueError(f"--shape {spec!r}: expected key=value[,value...]")
                shapes[key] = []
            elif key is None:
                raise ValueError(f"--shape {spec!r}: a value {token!r} comes before any key=")
            shapes[key].append(_scalar(token.strip()))
    return shapes


def presets_for(preset: ModelPreset | str, shapes: dict | None) -> list[ModelPreset]:
    """`preset` with every combination of the ``--shape`` values that name
    its fields (hidden_size, head_dim, ...); just ``[preset]`` when none do."""
    if isinstance(preset, str):
        if preset not in MODEL_PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: {', '.join(sorted(MODEL_PRESETS))}")
        preset = MODEL_PRESETS[preset]
    fields = {k: v for k, v in (shapes or {}).items() if k in PRESET_FIELDS}
    if not fields:
        return [preset]
    for key, values in fields.items():
        whole = isinstance(getattr(preset, key), int)
        for v in values:
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not number or (whole and not isinstance(v, int)) or not (0 < v < float("inf")):
                raise ValueError(f"--shape {key}={v!r}: {key} takes " + ("whole numbers >= 1" if whole else
                                 "finite numbers > 0"))
    keys = list(fields)
    return [
        dataclasses.replace(preset, **dict(zip(keys, combo)))
        for combo in itertools.product(*(fields[k] for k in keys))
    ]


# ---------------------------------------------------------------- bandwidth


def device_name() -> str:
    import torch

    from ..runtime import capabilities, current_target

    target = current_target()
    if target.device_type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    if capabilities(target).platform_card:
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


def peak_table() -> str:
    """The known peaks as text, for ``kunlun-triton bench --peak-table``."""
    lines = [f"{'device (substring match)':<26} peak GB/s"]
    lines += [f"{key:<26} {gbps:>9.0f}" for key, gbps in PEAK_BANDWIDTH_GBPS]
    lines.append(f"{'Kunlun P800':<26} {'unknown':>9}  (pass --peak-gbps)")
    return "\n".join(lines)
