"""What every checkpoint conversion shares: the error, the dtypes, casting
with the overflow report, and an output directory that appears only when
complete. convert_weights, quantize_weights and the GGUF converter
(tools/gguf/) import from here and from nothing of each other's, so no
import circle.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

DTYPES = {"fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp32": torch.float32, "float32": torch.float32}
# What config.json says for each dtype.
CONFIG_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
CONVERTED = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
class ConvertError(RuntimeError):
    """The conversion cannot or must not go ahead; the message says why."""


@dataclass
class Overflow:
    name: str
    max_abs: float
    count: int


@dataclass
class ConvertReport:
    converted: int = 0
    kept: list = field(default_factory=list)  # (name, dtype) of tensors left as they were
    overflows: list = field(default_factory=list)
    copied: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    quantized: int = 0  # --quantize: linear weights written as int8 + scale
    dequantized: int = 0  # --dequantize-mxfp4: expert tensors written as floats
    source_quantization: str | None = None  # what quantization the source already had, in words


def safetensors_api():
    try:
        import safetensors  # noqa: F401
        from safetensors import safe_open
        from safetensors.torch import save_file
    except ImportError as exc:
        raise ConvertError(
            "convert-weights needs the safetensors package: pip install safetensors "
            "(or pip install 'kunlun-triton[tools]')"
        ) from exc
    return safe_open, save_file


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def read_json(path: Path) -> dict:
    """A JSON object from `path`, or a ConvertError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConvertError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except UnicodeDecodeError:
        raise ConvertError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConvertError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _make_parents(directory: Path) -> list[Path]:
    """mkdir -p, returning the directories it created (outermost first)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir()
    return list(reversed(missing))


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def cast_tensor(name: str, t: torch.Tensor, dtype: torch.dtype, on_overflow: str, report: ConvertReport):
    """`t` in `dtype` when it is a float tensor we convert; else unchanged."""
    if t.dtype not in CONVERTED:
        report.kept.append((name, str(t.dtype).replace("torch.", "")))
        return t
    report.converted += 1
    limit = torch.finfo(dtype).max
    if torch.finfo(t.dtype).max > limit and t.numel():
        wide = t.float() if t.dtype != torch.float64 else t
        too_big = torch.isfinite(wide) & (wide.abs() > limit)
        count = int(too_big.sum())
        if count:
            report.overflows.append(Overflow(name, float(wide[too_big].abs().max()), count))
            if on_overflow == "clamp":
                # only the finite values that overflow: an inf in the source stays inf
                return torch.where(too_big, wide.sign() * limit, wide).to(dtype)
    return t.to(dtype)


@contextlib.contextmanager
def atomic_output_dir(out: Path):
    """A new output directory that appears only when complete: yields a
    temporary sibling of `out` to write into, renamed to `out` when the body
    ends; on any failure the sibling and the parents made for it are removed,
    and an OSError (disk full, permissions) becomes one ConvertError line.
    Files written with mode 0600 (safetensors) get the user's umask."""
    created, work = [], None
    try:
        created = _make_parents(out.parent)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        yield work
        for path in work.iterdir():
            if path.is_file():
                os.chmod(path, 0o666 & ~umask())
        os.chmod(work, 0o777 & ~umask())  # mkdtemp makes it 0700
        if out.exists() or out.is_symlink():
            raise ConvertError(f"--output {out} appeared while converting; refusing to overwrite it")
        os.rename(work, out)
    except BaseException as exc:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                break
        if isinstance(exc, OSError):
            raise ConvertError(f"{exc.filename or out}: {exc.strerror or first_line(exc)}; nothing written") from None
        raise
