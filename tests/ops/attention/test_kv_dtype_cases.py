"""The attention specs' ``kv_dtype`` (``bench`` / ``inspect --shape
kv_dtype=fp8_e4m3``): the case's pool holds fp8 bytes of value / scale, the
op runs on it with those scales (store_kv writes it), its result equals the
torch reference's, and the bytes it counts are one per cached value."""

import pytest
import torch

from strategies import DEVICE

from kunlun_triton.ops.spec import all_specs

SPECS = all_specs(("attention",))
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
HEADS = {"q_heads": 8, "kv_heads": 2, "head_dim": 64}
MLA = {"q_heads": 4, "kv_heads": 1, "head_dim": 80, "v_head_dim": 64}  # V the latent part of K's rows
SHAPES = {
    "decode_attention": [{"batch": 2, "context_len": 40, **HEADS}, {"batch": 2, "context_len": 40, **MLA}],
    "extend_attention": [{"batch": 2, "prefix_len": 24, "extend_len": 9, **HEADS, "custom_mask": False},
                         {"batch": 2, "prefix_len": 24, "extend_len": 9, **MLA, "custom_mask": False}],
}  # fmt: skip
POOL_ARG = {"decode_attention": 1, "extend_attention": 4}  # k_buffer's place in the case's args


def _pool(case, op):
    return case.args[POOL_ARG[op]], case.args[POOL_ARG[op] + 1]


@pytest.mark.parametrize("kv_dtype", list(FP8))
@pytest.mark.parametrize("op, index", [(op, i) for op in SHAPES for i in range(len(SHAPES[op]))])
def test_attention_case_reads_an_fp8_pool(op, index, kv_dtype):
    spec, dtype = SPECS[op], torch.float16
    shape = {**SHAPES[op][index], "kv_dtype": kv_dtype}
    case, plain = spec.make_case(shape, dtype, DEVICE), spec.make_case({**shape, "kv_dtype": "auto"}, dtype, DEVICE)
    (k, v), (k16, v16) = _pool(case, op), _pool(plain, op)
    assert k.dtype == v.dtype == FP8[kv_dtype] and k16.dtype == dtype
    mla = shape.get("v_head_dim", shape["head_dim"]) < shape["head_dim"]
    assert (v.data_ptr() == k.data_ptr()) == mla  # MLA's V stays a view of the latent rows
    # the same values, as bytes of value / scale: scale x byte is the value within fp8's rounding
    k_scale, v_scale = (0.5, 0.5) if mla else (0.5, 0.25)
    rel = 2.0**-4 if kv_dtype == "fp8_e4m3" else 2.0**-3
    for fp8, plain_rows, scale in ((k, k16, k_scale), (v, v16, v_scale)):
        want = plain_rows.float().cpu()
        assert torch.allclose(fp8.float().cpu() * scale, want, rtol=rel, atol=2.0**-9 * scale)
    out, ref = case.run(None), spec.make_case(shape, dtype, DEVICE).reference()
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
    # bytes: cached K / V at one byte per value, everything else in fp16
    tokens = shape["batch"] * (shape.get("extend_len", 1))
    cached = shape["batch"] * shape.get("context_len", shape.get("prefix_len"))
    row = shape["head_dim"] + (0 if mla else shape.get("v_head_dim", shape["head_dim"]))
    qo = tokens * shape["q_heads"] * (shape["head_dim"] + shape.get("v_head_dim", shape["head_dim"])) * 2
    new_kv = tokens * shape["kv_heads"] * row * 2 if op == "extend_attention" else 0
    assert case.bytes_moved == cached * shape["kv_heads"] * row + qo + new_kv
    assert plain.bytes_moved - case.bytes_moved == cached * shape["kv_heads"] * row


@pytest.mark.parametrize("kv_dtype", list(FP8))
def test_store_kv_case_writes_fp8_bytes(kv_dtype):
    """store_kv's case writes value / scale as torch's cast of the fp32 quotient."""
    spec = SPECS["store_kv"]
    case = spec.make_case({"tokens": 6, "kv_heads": 2, "head_dim": 64, "kv_dtype": kv_dtype}, torch.bfloat16, DEVICE)
    k, v, k_buffer, v_buffer, loc = case.args
    assert k_buffer.dtype == v_buffer.dtype == FP8[kv_dtype]
    case.run(None)
    for x, buffer, scale in ((k, k_buffer, 0.5), (v, v_buffer, 0.25)):
        want = (x.float().cpu() / scale).to(FP8[kv_dtype]).view(torch.uint8)
        assert torch.equal(buffer.cpu()[loc.cpu()].view(torch.uint8), want)
    assert case.bytes_moved == 2 * 6 * 2 * 64 * (2 + 1)  # K and V: read in bf16, written in fp8


@pytest.mark.parametrize("op", list(SPECS))
def test_bad_kv_dtype_is_refused(op):
    shape = {**SPECS[op].bench_shapes(None, True)[0], "kv_dtype": "int4"}
    with pytest.raises(ValueError, match="--shape kv_dtype=int4: expected one of auto, fp8_e4m3, fp8_e5m2"):
        SPECS[op].make_case(shape, torch.float16, DEVICE)
