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
  sibling temporary directory and renamed); a failed run leaves nothing;
- everything is checked before the first tensor is converted: every shard
  the index names must be a file inside ``--model-path`` (an absolute or
  ``../`` entry is refused: the converted shard is written at the same
  relative path under ``--output``), the index and config.json must be JSON
  objects, and every shard's header must read. Each failure is one line
  naming the file, exit status 1;
- the output's files and directory get the permissions the user's umask
  gives new files (source modes are not copied).

``--quantize w8a8-int8`` also quantizes the decoder's linear weights into
SGLang's ``w8a8_int8`` format (`quantize_weights`); ``--dequantize-mxfp4``
writes a gpt-oss MXFP4 checkpoint's experts as float tensors
(`mxfp4_weights`); both together write them as W8A8-INT8 (decoded to
float32, then quantized per output column).

Needs the ``safetensors`` package (``pip install kunlun-triton[tools]``).
``--from-gguf FILE`` converts a llama.cpp GGUF file instead: see
tools/gguf/convert.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import torch

# ConvertError, ConvertReport, Overflow, DTYPES: also this module's names for its callers
from .checkpoint_files import (CONFIG_NAMES, DTYPES, ConvertError, ConvertReport, Overflow,  # noqa: F401
                               atomic_output_dir, cast_tensor, first_line, read_json, safetensors_api, umask)
from .mxfp4_weights import Mxfp4Dequantizer
from .quantize_weights import is_quantization_tensor, quantized_format, quantizer
from .report import ProgressBar

INDEX_NAME = "model.safetensors.index.json"
SKIPPED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5")


@dataclass
class Plan:
    """What a conversion reads, all validated before anything is written."""

    files: list  # shard paths relative to the source directory (posix)
    names: dict  # shard -> tensor names in it
    index: dict | None  # model.safetensors.index.json, when there is one
    config: dict | None  # config.json, when there is one


def _shard_entry(index_path: Path, tensor: str, entry) -> str:
    """A weight_map value as a path relative to the source directory. The
    check is on the text, not the resolved file: a Hugging Face cache
    snapshot's shards are symlinks into ``../../blobs`` (read through, fine),
    but an entry must never name a place outside the directory, since the
    converted shard is written at the same relative path under --output."""
    where = f"{index_path}: weight_map entry {tensor!r} -> {entry!r}"
    if not isinstance(entry, str) or not entry.strip() or "\0" in entry:
        raise ConvertError(f"{where}: expected a shard file name")
    path = PurePosixPath(entry)
    if path.is_absolute() or ".." in path.parts or not path.parts or path.parts == (".",):
        raise ConvertError(f"{where}: a shard must be a file inside the checkpoint directory (no absolute or ../ path)")
    return path.as_posix()


def _weight_files(src: Path) -> tuple[list[str], dict | None]:
    """The shard files (relative paths) and the parsed index, if any."""
    index_path = src / INDEX_NAME
    if index_path.is_file():
        index = read_json(index_path)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ConvertError(f"{index_path}: expected a non-empty \"weight_map\" object of tensor name -> shard file")
        files = sorted({_shard_entry(index_path, name, entry) for name, entry in weight_map.items()})
        missing = [f for f in files if not (src / f).is_file()]
        if missing:
            raise ConvertError(f"{index_path} lists shards that are not there: {', '.join(missing)}")
        return files, index
    shards = sorted(src.glob("*.safetensors"))
    unreadable = [p.name for p in shards if not p.is_file()]  # a dangling symlink, a directory
    if unreadable:  # a missing weight must fail the conversion, not become a "not copied" line
        raise ConvertError(f"shards that are not readable files (a dangling symlink?): {', '.join(unreadable)} in {src}")
    files = [p.name for p in shards]
    if not files:
        raise ConvertError(f"no *.safetensors files (and no {INDEX_NAME}) in {src}")
    return files, None


def _tensor_names(safe_open, src: Path, files: list[str], index: dict | None) -> dict:
    """Each shard's tensor names, reading only the headers: a corrupt or
    truncated shard fails here, before anything is written."""
    names = {}
    for f in files:
        try:
            with safe_open(src / f, framework="pt") as handle:
                names[f] = list(handle.keys())
        except Exception as exc:  # SafetensorError, OSError: the message says which
            raise ConvertError(f"{src / f}: not a readable safetensors file ({first_line(exc)})") from None
    if index is not None:
        for tensor, entry in index["weight_map"].items():
            shard = PurePosixPath(entry).as_posix()
            if tensor not in names[shard]:
                raise ConvertError(
                    f"{src / INDEX_NAME}: weight_map puts {tensor!r} in {shard}, which has no such tensor"
                )
    return names


def _plan(safe_open, src: Path) -> Plan:
    files, index = _weight_files(src)
    config_path = src / "config.json"
    config = read_json(config_path) if config_path.exists() else None
    return Plan(files, _tensor_names(safe_open, src, files, index), index, config)


def _check_paths(src: Path, out: Path) -> None:
    if not src.is_dir():
        raise ConvertError(f"--model-path {src} is not a directory")
    s, o = src.resolve(), out.resolve()
    if o == s or s in o.parents:
        raise ConvertError(f"--output {out} is inside the source checkpoint {src}; pick a new directory")
    if out.exists() or out.is_symlink():
        raise ConvertError(f"--output {out} already exists; refusing to overwrite it")
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConvertError(f"--output {out}: {parent} is not a directory")
            break


def _update_config(config: dict, dtype_name: str) -> dict:
    """torch_dtype / dtype set at the top and in nested sub-configs that have one."""
    config = dict(config)
    config["torch_dtype"] = dtype_name
    config["dtype"] = dtype_name
    for key, value in config.items():
        if isinstance(value, dict) and ("torch_dtype" in value or "dtype" in value):
            config[key] = {**value, **{k: dtype_name for k in ("torch_dtype", "dtype") if k in value}}
    return config


def convert(model_path, output, dtype="fp16", on_overflow="clamp", progress=True, quantize=None,
            dequantize_mxfp4=False) -> ConvertReport:  # fmt: skip
    """Convert the checkpoint at `model_path` into the new directory `output`.

    Everything is read and validated first (paths, index and config JSON,
    every shard's header); the output is built in a temporary sibling
    directory and renamed at the end, so a run that fails for any reason
    leaves no output (and no parent directories it created). Files get the
    permissions a new file gets under the user's umask."""
    if dtype not in DTYPES:
        raise ConvertError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if on_overflow not in ("clamp", "refuse"):
        raise ConvertError(f"--on-overflow {on_overflow!r}: expected clamp or refuse")
    target = DTYPES[dtype]
    quantizer(quantize)  # a bad method is refused before anything is read
    src, out = Path(model_path), Path(output)
    _check_paths(src, out)
    safe_open, save_file = safetensors_api()
    plan = _plan(safe_open, src)
    quant = quantizer(quantize, plan.config)
    report = ConvertReport()
    report.source_quantization = quantized_format(plan.config, _dtypes(safe_open, src, plan))
    mxfp4 = Mxfp4Dequantizer(safe_open, src, plan.names, plan.config) if dequantize_mxfp4 else None
    if report.source_quantization and quant is not None and mxfp4 is None:
        raise ConvertError(f"--quantize {quantize}: {src} is already quantized ({report.source_quantization}); "
                           "give a float checkpoint; nothing written")
    with atomic_output_dir(out) as work:
        sizes = _convert_shards(safe_open, save_file, src, work, plan, target, dtype, on_overflow, report, progress,
                                quant, mxfp4)  # fmt: skip
        _copy_the_rest(src, work, plan, target, sizes, report, quant, mxfp4)
        report.quantized = quant.quantized if quant is not None else 0
    return report


def _dtypes(safe_open, src: Path, plan: Plan) -> dict:
    """Every tensor's dtype, from the shard headers (slices read nothing)."""
    dtypes = {}
    for f in plan.files:
        with safe_open(src / f, framework="pt") as handle:
            for name in plan.names[f]:
                dtypes[name] = handle.get_slice(name).get_dtype()
    return {name: getattr(torch, _TORCH_NAMES.get(d, d.lower()), None) for name, d in dtypes.items()}


# safetensors' dtype names -> torch's
_TORCH_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}  # fmt: skip


def _convert_shards(safe_open, save_file, src, work, plan, target, dtype, on_overflow, report, progress,
                    quant=None, mxfp4=None) -> int:  # fmt: skip
    """Cast and write every shard into `work`; returns the bytes written."""
    bar = ProgressBar(sum(len(v) for v in plan.names.values())) if progress else None
    done, sizes = 0, 0
    for f in plan.files:
        tensors = {}
        try:
            with safe_open(src / f, framework="pt") as handle:
                metadata = handle.metadata() or {}
                for name in plan.names[f]:
                    if bar:
                        bar.update(done, f"{f}: {name}")
                    t = handle.get_tensor(name)
                    if mxfp4 is not None and mxfp4.owns(name):
                        new = mxfp4.convert(f, name, t, target if quant is None else torch.float32)
                        report.dequantized += len(new)
                        if quant is not None:  # MXFP4 -> W8A8-INT8 through float32
                            new = {k: v for float_name, w in new.items() for k, v in quant.quantize(f, float_name, w).items()}
                    elif report.source_quantization and is_quantization_tensor(name):
                        report.kept.append((name, str(t.dtype).replace("torch.", "")))  # scales keep their dtype
                        new = {name: t}
                    elif quant is not None and quant.owns(name, t):
                        new = quant.quantize(f, name, t)
                    else:
                        new = {name: cast_tensor(name, t, target, on_overflow, report)}
                    tensors.update(new)
                    sizes += sum(v.numel() * v.element_size() for v in new.values())
                    done += 1
        except (ConvertError, OSError):
            raise
        except Exception as exc:  # a tensor whose bytes do not decode
            raise ConvertError(f"{src / f}: not a readable safetensors file ({first_line(exc)})") from None
        if on_overflow == "refuse" and report.overflows:
            continue  # nothing will be written; keep reading to report every overflow
        (work / f).parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(work / f), metadata={**metadata, "format": metadata.get("format", "pt")})
        os.chmod(work / f, 0o666 & ~umask())  # safetensors writes 0600
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
    return sizes


def _copy_the_rest(src: Path, work: Path, plan: Plan, target, total_size: int, report: ConvertReport,
                   quant=None, mxfp4=None) -> None:  # fmt: skip
    for path in sorted(src.iterdir()):
        if path.name in plan.files:
            continue
        if path.is_dir() or path.name.endswith(SKIPPED_SUFFIXES) or path.suffix == ".safetensors":
            report.skipped.append(path.name)
        elif path.name == "config.json" and plan.config is not None:
            config = _update_config(plan.config, CONFIG_NAMES[target])
            config = mxfp4.update_config(config) if mxfp4 is not None else config
            config = quant.update_config(config) if quant is not None else config
            (work / path.name).write_text(json.dumps(config, indent=2) + "\n")
            report.copied.append(path.name)
        elif path.name == INDEX_NAME and plan.index is not None:
            index = mxfp4.update_index(plan.index) if mxfp4 is not None else dict(plan.index)
            index = quant.update_index(index) if quant is not None else index
            index["metadata"] = {**(index.get("metadata") or {}), "total_size": total_size}
            (work / path.name).write_text(json.dumps(index, indent=2) + "\n")
            report.copied.append(path.name)
        else:
            # contents only (not copy2): the new file's mode follows the umask
            shutil.copyfile(path, work / path.name)
            report.copied.append(path.name)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kunlun-triton convert-weights", description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model-path", help="the source checkpoint directory (read only)")
    source.add_argument("--from-gguf", metavar="FILE", help="a llama.cpp GGUF file (read only): see tools/gguf/convert.py")
    p.add_argument("--output", required=True, help="a new directory for the converted checkpoint")
    p.add_argument("--dtype", default="fp16", choices=sorted(DTYPES))
    p.add_argument("--on-overflow", default="clamp", choices=("clamp", "refuse"),
                   help="values beyond the dtype's range: clamp them, or write nothing")
    p.add_argument("--quantize", choices=("w8a8-int8",), default=None,
                   help="also quantize the decoder's linear weights (SGLang's w8a8_int8 format)")
    p.add_argument("--dequantize-mxfp4", action="store_true",
                   help="write a gpt-oss MXFP4 checkpoint's experts as --dtype tensors (HF's layout), or with "
                        "--quantize w8a8-int8 as int8 experts")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.from_gguf and (args.quantize or args.dequantize_mxfp4):
        flag = f"--quantize {args.quantize}" if args.quantize else "--dequantize-mxfp4"
        print(f"error: {flag} applies to --model-path checkpoints: convert the GGUF file first, then convert "
              "that checkpoint; nothing written", file=sys.stderr)  # fmt: skip
        return 1
    if args.from_gguf:
        from .gguf.convert import run

        return run(args)
    try:
        report = convert(args.model_path, args.output, args.dtype, args.on_overflow, progress=not args.quiet,
                         quantize=args.quantize, dequantize_mxfp4=args.dequantize_mxfp4)  # fmt: skip
    except ConvertError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; nothing written", file=sys.stderr)
        return 130
    if args.dequantize_mxfp4:
        print(f"dequantized {report.dequantized} MXFP4 expert tensors to {args.quantize or args.dtype}")
    elif report.source_quantization:
        print(f"the source is already quantized ({report.source_quantization}): its quantized weights and scales "
              f"are copied unchanged, other floating-point tensors converted")
    if args.quantize:
        print(f"quantized {report.quantized} linear weights to {args.quantize} (int8 + fp32 per-channel scales)")
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
