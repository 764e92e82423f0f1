"""Stand-in op specs for the tools' tests: torch-only (and one tiny Triton
kernel), deterministic in what they offer; times are whatever the machine
measures. Install them with `install(monkeypatch)`."""

from __future__ import annotations

import time

import torch
import triton
import triton.language as tl

from kunlun_triton.ops import spec as op_spec
from kunlun_triton.ops.spec import OpCase, OpSpec


def _scale_case(shape, dtype, device):
    x = torch.randn(shape["batch"], shape["hidden_size"], generator=torch.Generator().manual_seed(0)).to(dtype)
    return OpCase(run=lambda config: torch.mul(x, 2.0), reference=lambda: x + x, dims={"hidden_size": x.shape[1]},
                  bytes_moved=2 * x.numel() * x.element_size())  # fmt: skip


def _broken_case(shape, dtype, device):
    def boom(config):
        raise RuntimeError("kernel exploded")

    return OpCase(run=boom, reference=lambda: torch.zeros(8), dims={"n": 8}, bytes_moved=64)


def _sleepy_case(shape, dtype, device):
    """Config "a" wins up to n=64, "b" above: the slow one sleeps 10 ms."""
    n = shape["n"]

    def run(config):
        if config["VARIANT"] == "broken":
            raise ValueError("this config does not compile")
        time.sleep(0.010 if (config["VARIANT"] == "a") == (n > 64) else 0.0)
        return torch.ones(1)

    return OpCase(run=run, reference=lambda: torch.ones(1), dims={"n": n})


@triton.jit
def _scale_rows_kernel(x_ptr, y_ptr, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # y = 2 * x, ROWS rows per program
    cols = tl.arange(0, BLOCK)
    for r in range(ROWS):
        row = tl.program_id(0) * ROWS + r
        mask = (cols < n_cols) & ((cols * 0 + row) < n_rows)
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
        tl.store(y_ptr + row * n_cols + cols, 2.0 * x, mask=mask)


def scale_rows(x, config):
    y = torch.empty_like(x)
    grid = (triton.cdiv(x.shape[0], config.get("ROWS", 1)),)
    _scale_rows_kernel[grid](x, y, x.shape[0], x.shape[1], ROWS=config.get("ROWS", 1), BLOCK=config.get("BLOCK", 32))
    return y


def _scale_rows_case(shape, dtype, device):
    x = torch.randn(shape["num_tokens"], 32, generator=torch.Generator().manual_seed(1)).to(device)
    return OpCase(run=lambda config: scale_rows(x, config or {}), reference=lambda: 2 * x,
                  dims={"num_tokens": shape["num_tokens"]})  # fmt: skip


def _quick_or(quick, small, large):
    return small if quick else large


SPECS = [
    OpSpec("scale", "fake", _scale_case, (({"batch": 2, "hidden_size": 8}, torch.float32),),
           lambda preset, quick: [{"batch": b, "hidden_size": preset.hidden_size} for b in _quick_or(quick, [1, 4], [1, 16, 256])],
           bench_dtype=torch.float32, x_axis="batch"),
    OpSpec("broken", "fake", _broken_case, (({"n": 8}, torch.float32),), lambda preset, quick: [{"n": 8}],
           bench_dtype=torch.float32),
    OpSpec("sleepy_op", "sleepy", _sleepy_case, (), lambda preset, quick: [{"n": n} for n in (16, 64, 256)],
           tune_candidates=lambda quick: [{"VARIANT": "a"}, {"VARIANT": "b"}, {"VARIANT": "broken"}]),
    OpSpec("scale_rows", "scaling", _scale_rows_case, (), lambda preset, quick: [{"num_tokens": n} for n in (4, 8)],
           bench_dtype=torch.float32,
           tune_candidates=lambda quick: [{"ROWS": 1, "BLOCK": 32}, {"ROWS": 4, "BLOCK": 32}]),
]  # fmt: skip


def install(monkeypatch, specs=SPECS) -> None:
    """Make every tool see `specs` instead of the real op families."""
    monkeypatch.setattr(op_spec, "all_specs", lambda families=None: {s.name: s for s in specs})
    # The config-key rules are built from all_specs on first use: built now, they
    # would outlive the test (a later test's config file checked against fakes).
    monkeypatch.setattr(op_spec.CONFIG_RULES, "_rules", None)
