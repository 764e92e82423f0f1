"""`kunlun-triton convert-weights`: a safetensors checkpoint in another dtype.

For targets whose bf16 support is incomplete (Kunlun, see docs/design.md): write
an fp16 copy of a Hugging Face checkpoint into a new directory::

    kunlun-triton convert-weights --model-path Llama-3-8B --dtype fp16 --output Llama-3-8B-fp16

- every ``*.safetensors`` file (one, or shards listed by
  ``model.safetensors.index.json``) is rewritten with its floating-point
  tensors cast; integer, bool and fp8 tensors (quantized weights, scales'
  companions, position ids) are kept as they are;
- a finite value beyond fp16's range (65504) would become inf: such tensors
  are reported, and ``--on-overflow clamp`` (default) clamps them to the
  range while ``refuse`` writes nothing;
- config.json gets the new ``torch_dtype`` (and ``dtype``, which newer
  transformers read); tokenizer, generation config and other small files are
  copied unchanged; pickled weights (``*.bin``, ``*.pt``) are not copied;
- the source directory is never written to, an existing output is never
  overwritten, and the output appears only when complete (it is built in a
  sibling temporary directory and renamed).

Needs the ``safetensors`` package (``pip install kunlun-triton[tools]``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .report import ProgressBar

DTYPES = {"fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp32": torch.float32, "float32": torch.float32}
# What config.json says for each dtype.
CONFIG_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
CONVERTED = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INDEX_NAME = "model.safetensors.index.json"
SKIPPED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5")


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


def _safetensors():
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


def _weight_files(src: Path) -> list[str]:
    index = src / INDEX_NAME
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map") or {}
        files = sorted(set(weight_map.values()))
        missing = [f for f in files if not (src / f).is_file()]
        if missing:
            raise ConvertError(f"{index} lists shards that are not there: {', '.join(missing)}")
        return files
    files = sorted(p.name for p in src.glob("*.safetensors"))
    if not files:
        raise ConvertError(f"no *.safetensors files (and no {INDEX_NAME}) in {src}")
    return files


def _check_paths(src: Path, out: Path) -> None:
    if not src.is_dir():
        raise ConvertError(f"--model-path {src} is not a directory")
    s, o = src.resolve(), out.resolve()
    if o == s or s in o.parents:
        raise ConvertError(f"--output {out} is inside the source checkpoint {src}; pick a new directory")
    if out.exists() or out.is_symlink():
        raise ConvertError(f"--output {out} already exists; refusing to overwrite it")


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


def _update_config(config: dict, dtype_name: str) -> dict:
    """torch_dtype / dtype set at the top and in nested sub-configs that have one."""
    config = dict(config)
    config["torch_dtype"] = dtype_name
    config["dtype"] = dtype_name
    for key, value in config.items():
        if isinstance(value, dict) and ("torch_dtype" in value or "dtype" in value):
            config[key] = {**value, **{k: dtype_name for k in ("torch_dtype", "dtype") if k in value}}
    return config


def convert(model_path, output, dtype="fp16", on_overflow="clamp", progress=True) -> ConvertReport:
    """Convert the checkpoint at `model_path` into the new directory `output`."""
    if dtype not in DTYPES:
        raise ConvertError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if on_overflow not in ("clamp", "refuse"):
        raise ConvertError(f"--on-overflow {on_overflow!r}: expected clamp or refuse")
    target = DTYPES[dtype]
    src, out = Path(model_path), Path(output)
    _check_paths(src, out)
    safe_open, save_file = _safetensors()
    files = _weight_files(src)
    report = ConvertReport()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        total = 0
        names_per_file = {}
        for f in files:
            with safe_open(src / f, framework="pt") as handle:
                names_per_file[f] = list(handle.keys())
            total += len(names_per_file[f])
        bar = ProgressBar(total) if progress else None
        done, sizes = 0, 0
        for f in files:
            tensors = {}
            with safe_open(src / f, framework="pt") as handle:
                metadata = handle.metadata() or {}
                for name in names_per_file[f]:
                    if bar:
                        bar.update(done, f"{f}: {name}")
                    tensors[name] = cast_tensor(name, handle.get_tensor(name), target, on_overflow, report)
                    sizes += tensors[name].numel() * tensors[name].element_size()
                    done += 1
            if on_overflow == "refuse" and report.overflows:
                continue  # nothing will be written; keep reading to report every overflow
            save_file(tensors, str(work / f), metadata={**metadata, "format": metadata.get("format", "pt")})
            del tensors
        if bar:
            bar.update(done, "done")
            bar.close()
        if on_overflow == "refuse" and report.overflows:
            worst = ", ".join(f"{o.name} (max |x| {o.max_abs:.4g}, {o.count} values)" for o in report.overflows[:5])
            raise ConvertError(
                f"{len(report.overflows)} tensor(s) overflow {dtype} and --on-overflow refuse is set: {worst}; "
                "nothing written"
            )
        _copy_the_rest(src, work, files, target, sizes, report)
        os.rename(work, out)  # the output appears only when complete
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return report


def _copy_the_rest(src: Path, work: Path, files, target, total_size: int, report: ConvertReport) -> None:
    for path in sorted(src.iterdir()):
        if path.name in files:
            continue
        if path.is_dir() or path.name.endswith(SKIPPED_SUFFIXES) or path.suffix == ".safetensors":
            report.skipped.append(path.name)
        elif path.name == "config.json":
            config = _update_config(json.loads(path.read_text()), CONFIG_NAMES[target])
            (work / path.name).write_text(json.dumps(config, indent=2) + "\n")
            report.copied.append(path.name)
        elif path.name == INDEX_NAME:
            index = json.loads(path.read_text())
            index["metadata"] = {**(index.get("metadata") or {}), "total_size": total_size}
            (work / path.name).write_text(json.dumps(index, indent=2) + "\n")
            report.copied.append(path.name)
        else:
            shutil.copy2(path, work / path.name)
            report.copied.append(path.name)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kunlun-triton convert-weights", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True, help="the source checkpoint directory (read only)")
    p.add_argument("--output", required=True, help="a new directory for the converted checkpoint")
    p.add_argument("--dtype", default="fp16", choices=sorted(DTYPES))
    p.add_argument("--on-overflow", default="clamp", choices=("clamp", "refuse"),
                   help="values beyond the dtype's range: clamp them, or write nothing")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = convert(args.model_path, args.output, args.dtype, args.on_overflow, progress=not args.quiet)
    except ConvertError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"converted {report.converted} floating-point tensors to {args.dtype}; kept {len(report.kept)} as they were")
    for name, dtype in report.kept[:10]:
        print(f"  kept {name} ({dtype})")
    for o in report.overflows:
        print(f"  overflow: {o.name}: {o.count} values beyond {args.dtype}'s range (max |x| {o.max_abs:.4g}), clamped")
    print(f"copied: {', '.join(report.copied) or '(nothing)'}")
    if report.skipped:
        print(f"not copied: {', '.join(report.skipped)}")
    print(f"wrote {args.output}")
    return 0
