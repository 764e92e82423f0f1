"""GGUF files to HF checkpoints, one module per concern: convert.py says which."""
