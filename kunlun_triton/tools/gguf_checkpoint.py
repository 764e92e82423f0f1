"""`kunlun-triton convert-weights --from-gguf FILE`: a GGUF file as a Hugging Face checkpoint.

llama.cpp's GGUF files hold a model's weights (often block-quantized), its
hyper-parameters and its tokenizer in one file. SGLang and HF transformers
read safetensors checkpoints; this writes one::

    kunlun-triton convert-weights --from-gguf SmolLM2-135M-Instruct.Q4_1.gguf --output smollm2 --dtype fp32

- tensors are read and dequantized by the ``gguf`` package (llama.cpp's own
  Python reader: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the K-quants, F16, BF16, F32)
  into float32, then cast to ``--dtype``. fp32 is exact: every quantized
  value is ``d * q (+ m)`` with fp16 ``d``/``m`` and a small integer ``q``;
  bf16 and fp16 round it;
- llama.cpp stores Llama's q/k projections permuted for its rope layout
  (pairs ``(i, i + d/2)`` made adjacent); the permutation is undone, so the
  checkpoint uses HF's rotate-half rope like the original model;
- config.json is built from the GGUF's ``llama.*`` keys; no ``output.weight``
  means tied embeddings;
- the tokenizer (tokenizer.json, tokenizer_config.json) and the chat template
  come from transformers' GGUF tokenizer converter (needs ``transformers``);
- the same output rules as convert-weights: the source file is only read, an
  existing output is never overwritten, the output appears complete or not at
  all (built in a sibling temporary directory and renamed).

Llama-family models only (``general.architecture`` llama); anything else is
refused with a message naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .convert_weights import (CONFIG_NAMES, DTYPES, ConvertError, ConvertReport, _first_line, atomic_output_dir,
                              cast_tensor)
from .report import ProgressBar

ARCHITECTURES = ("llama",)
SHARD_BYTES = 4 << 30  # one safetensors file up to 4 GiB, then shards and an index (HF's own default is 5 GB)

# GGUF tensor name (after "blk.N.") -> HF Llama name (after "model.layers.N.")
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def _gguf():
    try:
        import gguf
    except ImportError as exc:
        raise ConvertError(
            "convert-weights --from-gguf needs the gguf package: pip install gguf "
            "(or pip install 'kunlun-triton[tools]')"
        ) from exc
    return gguf


def open_gguf(path) -> object:
    """A ``gguf.GGUFReader`` over `path` (memory-mapped, read only), or a ConvertError."""
    gguf = _gguf()
    path = Path(path)
    if not path.is_file():
        raise ConvertError(f"--from-gguf {path} is not a file")
    try:
        return gguf.GGUFReader(path, "r")
    except Exception as exc:  # ValueError on a bad magic, struct errors on truncation
        raise ConvertError(f"{path}: not a readable GGUF file ({_first_line(exc)})") from None


def _field(reader, key, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def gguf_config(reader) -> dict:
    """The HF config.json of a Llama-family GGUF (dtype keys added by the writer)."""
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ConvertError(f"GGUF architecture {arch!r} is not supported (supported: {', '.join(ARCHITECTURES)})")
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise ConvertError("GGUF has rope_freqs.weight (Llama 3.1-style rope scaling), which is not supported")

    def need(key):
        value = _field(reader, f"{arch}.{key}")
        if value is None:
            raise ConvertError(f"GGUF metadata has no {arch}.{key}")
        return value

    hidden, heads = int(need("embedding_length")), int(need("attention.head_count"))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    vocab = _field(reader, f"{arch}.vocab_size") or (len(tokens) if tokens else None)
    if vocab is None and embed is not None:
        vocab = int(embed.shape[-1])
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(_field(reader, f"{arch}.attention.key_length", hidden // heads)),
        "max_position_embeddings": int(_field(reader, f"{arch}.context_length", 4096)),
        "rms_norm_eps": float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "vocab_size": int(vocab),
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in names,
    }
    scaling = _field(reader, f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise ConvertError(f"GGUF rope scaling {scaling!r} is not supported (only linear)")
        config["rope_scaling"] = {"rope_type": "linear", "factor": float(need("rope.scaling.factor"))}
    for key in ("bos", "eos", "padding"):
        value = _field(reader, f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            config["pad_token_id" if key == "padding" else f"{key}_token_id"] = int(value)
    return config


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's convert permutation of a q or k projection [n_head*d, hidden]:
    it wrote ``w.reshape(n_head, 2, d/2, ...).swapaxes(1, 2)``."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(name: str) -> str:
    """The HF Llama name of GGUF tensor `name`, or a ConvertError."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in LAYER_NAMES:
        return f"model.layers.{int(parts[1])}.{LAYER_NAMES[parts[2]]}"
    raise ConvertError(f"GGUF tensor {name!r} has no Llama counterpart")


def dequantized(tensor, config: dict) -> np.ndarray:
    """GGUF `tensor` as a float32 array in HF's layout ([out, in] for weights)."""
    gguf = _gguf()
    try:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise ConvertError(f"GGUF tensor {tensor.name}: type {tensor.tensor_type.name} cannot be dequantized") from None
    # a copy when the reader handed out its read-only memory map (F32 tensors)
    shape = tuple(int(n) for n in reversed(tensor.shape))
    data = np.array(data, dtype=np.float32, copy=not data.flags.writeable).reshape(shape)
    if tensor.name.endswith("attn_q.weight"):
        data = _unpermute(data, config["num_attention_heads"])
    elif tensor.name.endswith("attn_k.weight"):
        data = _unpermute(data, config["num_key_value_heads"])
    return data


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
    for t in reader.tensors:
        hf_name(t.name)  # every name known before anything is written
    with atomic_output_dir(out) as work:
        _write_tensors(reader, config, work, target, progress, on_overflow)
        dtype_name = CONFIG_NAMES[target]
        (work / "config.json").write_text(json.dumps({**config, "torch_dtype": dtype_name, "dtype": dtype_name},
                                                     indent=2) + "\n")
        generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config}
        (work / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        if tokenizer:
            _write_tokenizer(src, work)
    return config


def _write_tensors(reader, config, work: Path, target, progress: bool, on_overflow: str) -> None:
    from .convert_weights import _safetensors

    _, save_file = _safetensors()
    bar = ProgressBar(len(reader.tensors)) if progress else None
    shards, current, size, report = [], {}, 0, ConvertReport()
    for i, t in enumerate(reader.tensors):
        if bar:
            bar.update(i, t.name)
        name = hf_name(t.name)
        tensor = cast_tensor(name, torch.from_numpy(dequantized(t, config)), target, on_overflow, report).contiguous()
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


def _write_tokenizer(src: Path, work: Path) -> None:
    """tokenizer.json, tokenizer_config.json and the chat template, through
    transformers' GGUF tokenizer converter."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConvertError(
            "convert-weights --from-gguf needs transformers for the tokenizer: pip install transformers"
        ) from exc
    try:
        tok = AutoTokenizer.from_pretrained(str(src.resolve().parent), gguf_file=src.name)
    except Exception as exc:
        raise ConvertError(f"{src}: its tokenizer cannot be converted ({_first_line(exc)})") from None
    tok.save_pretrained(str(work))


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
