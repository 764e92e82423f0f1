"""Forward hooks on SGLang's layers, routed to our ops: fused ops (RMSNorm,
activations, rotary, soft-capping), MoE, W8A8-INT8 quantization, collectives,
batch invariance. Imports nothing: each module is imported by its own path."""
