"""What SGLang's model runner calls per forward step, on our kernels:
attention (``attention.py``, its metadata in ``attention_metadata.py``),
sampling (``sampler.py``), the KV pool and paged allocator (``kv_pool.py``).
Imports nothing: each module is imported by its own path (they import SGLang)."""
