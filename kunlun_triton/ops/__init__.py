"""Public ops: validate inputs, pick a config, launch the Triton kernel (or the
torch reference where no Triton target runs). One module per op family."""
