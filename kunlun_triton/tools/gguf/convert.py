"""`kunlun-triton convert-weights --from-gguf FILE`: a GGUF file as a Hugging Face checkpoint.

llama.cpp's GGUF files hold a model's weights (often block-quantized), its
hyper-parameters and its tokenizer in one file. SGLang and HF transformers
read safetensors checkpoints; this writes one::

    kunlun-triton convert-weights --from-gguf qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --output qwen --dtype fp32

Architectures (``general.architecture``): llama, qwen2, qwen3, qwen2moe,
qwen3moe, gemma2, gemma3; anything else is refused naming it, as is a tensor
type dequant.py does not know. The work is split by concern:

- reader.py opens the file (the ``gguf`` package's memory-mapped reader);
- dequant.py turns every tensor into float32, bitwise what llama.cpp
  computes (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q4_K/Q5_K/Q6_K, F16, BF16, F32): fp32
  is exact; bf16 and fp16 round it (``--dtype``);
- archs.py maps each architecture's tensor names to HF's and undoes
  llama.cpp's layout changes (Llama's q/k permutation, Gemma's +1 norms,
  MoE experts stacked in one tensor);
- configs.py builds config.json from the ``<arch>.*`` keys (no
  ``output.weight`` means tied embeddings; sliding window and soft-capping
  for Gemma; experts for MoE);
- tokenizer.py writes tokenizer.json / tokenizer_config.json and the chat
  template (transformers' GGUF tokenizer converter);
- this module writes the checkpoint with convert-weights' output rules: the
  source file is only read, every tensor name and type and the config are
  checked before anything is written, an existing output is never
  overwritten, and the output appears complete or not at all (built in a
  sibling temporary directory and renamed).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..checkpoint_files import CONFIG_NAMES, DTYPES, ConvertError, ConvertReport, atomic_output_dir, cast_tensor
from ..checkpoint_files import safetensors_api
from ..report import ProgressBar
from .archs import check_name, hf_tensors
from .configs import architecture, gguf_config
from .reader import check_types, open_gguf, read_float32
from .tokenizer import write_tokenizer

SHARD_BYTES = 4 << 30  # one safetensors file up to 4 GiB, then shards and an index (HF's own default is 5 GB)


def _check_paths(src: Path, out: Path) -> None:
    if out.exists() or out.is_symlink():
        raise ConvertError(f"--output {out} already exists; refusing to overwrite it")
    if out.resolve() == src.resolve():
        raise ConvertError(f"--output {out} is the source file")
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConvertError(f"--output {out}: {parent} is not a directory")
            break


def convert_gguf(gguf_file, output, dtype="bf16", progress=True, tokenizer=True, on_overflow="clamp") -> dict:
    """Write the HF checkpoint of `gguf_file` into the new directory `output`;
    returns its config. `tokenizer=False` writes weights and config only (no
    transformers needed). A value beyond fp16's range is clamped to it
    (``on_overflow="clamp"``) or nothing is written (``"refuse"``), as in
    convert-weights."""
    if dtype not in DTYPES:
        raise ConvertError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    target = DTYPES[dtype]
    src, out = Path(gguf_file), Path(output)
    reader = open_gguf(src)
    _check_paths(src, out)
    config = gguf_config(reader)
    arch = architecture(reader)
    for t in reader.tensors:
        check_name(arch, t.name)  # every name and type known before anything is written
    check_types(reader)
    with atomic_output_dir(out) as work:
        _write_tensors(reader, arch, config, work, target, progress, on_overflow)
        dtype_name = CONFIG_NAMES[target]
        written = {**config, "torch_dtype": dtype_name, "dtype": dtype_name}
        if tokenizer:
            # the version that wrote the tokenizer: without one, transformers >= 5 suspects any local
            # tokenizer of Mistral's old pre-tokenizer regex and warns on every load
            written["transformers_version"] = write_tokenizer(src, work)
        (work / "config.json").write_text(json.dumps(written, indent=2) + "\n")
        generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config}
        (work / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return config


def _write_tensors(reader, arch, config, work: Path, target, progress: bool, on_overflow: str) -> None:
    _, save_file = safetensors_api()
    bar = ProgressBar(len(reader.tensors)) if progress else None
    shards, current, size, report = [], {}, 0, ConvertReport()
    for i, t in enumerate(reader.tensors):
        if bar:
            bar.update(i, t.name)
        for name, data in hf_tensors(arch, t.name, read_float32(t), config):
            tensor = cast_tensor(name, torch.from_numpy(data), target, on_overflow, report).contiguous()
            nbytes = tensor.numel() * tensor.element_size()
            if current and size + nbytes > SHARD_BYTES:
                shards.append(current)
                current, size = {}, 0
            current[name] = tensor
            size += nbytes
    shards.append(current)
    if bar:
        bar.update(len(reader.tensors), "writing")
        bar.close()
    if report.overflows and on_overflow == "refuse":
        worst = ", ".join(f"{o.name} (max |x| {o.max_abs:.4g})" for o in report.overflows[:5])
        raise ConvertError(f"{len(report.overflows)} tensor(s) overflow the dtype and --on-overflow refuse is set: "
                           f"{worst}; nothing written")
    if len(shards) == 1:
        save_file(shards[0], str(work / "model.safetensors"), metadata={"format": "pt"})
        return
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(work / name), metadata={"format": "pt"})
        for key, tensor in shard.items():
            weight_map[key] = name
            total += tensor.numel() * tensor.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (work / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def run(args) -> int:
    """convert-weights' entry for --from-gguf (arguments already parsed)."""
    import sys

    dtype = args.dtype
    try:
        config = convert_gguf(args.from_gguf, args.output, dtype, progress=not args.quiet, on_overflow=args.on_overflow)
    except ConvertError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; nothing written", file=sys.stderr)
        return 130
    print(f"converted {args.from_gguf}: {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
          f"vocab {config['vocab_size']}, {dtype}")
    print(f"wrote {args.output}")
    return 0
