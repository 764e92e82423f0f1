"""SGLang's own implementations, wrapped so the benchmarks can time them
side by side with ours (each module imports sglang and raises ImportError
when it is absent)."""
