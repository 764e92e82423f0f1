"""W8A8-INT8 family: per-token activation quantization (`per_token_quant_int8`)
and the int8 x int8 -> int32 GEMM with scales and bias in its epilogue
(`int8_scaled_mm`); SGLang's ``--quantization w8a8_int8`` reaches them."""

from .ops import int8_scaled_mm, int32_accumulators, per_token_quant_int8

__all__ = ["int32_accumulators", "int8_scaled_mm", "per_token_quant_int8"]
