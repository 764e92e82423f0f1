"""SGLang-side tools: ``serve`` (``kunlun-triton serve``), ``regress`` (the
real-model regression), ``tiny_model`` (tiny checkpoints for tests),
``baselines`` (SGLang's kernels beside ours for bench / inspect). They import
SGLang (function-level where ``kunlun_triton.tools`` reaches them without it).
Imports nothing: each module is imported by its own path."""
