"""SGLang's own implementations, wrapped so the benchmarks can time them
side by side with ours (each module imports sglang and raises ImportError
when it is absent)."""


def bench_baselines() -> dict:
    """``{op: {"sglang": fn(case) -> thunk}}``: SGLang's kernel for the op,
    run on a bench case's inputs (`OpCase.args`, the op's positional inputs)."""
    from .attention import decode_baseline, extend_baseline
    from .moe import fused_experts_baseline, moe_topk_baseline
    from .sampling import sample_baseline

    return {
        "decode_attention": {"sglang": decode_baseline},
        "extend_attention": {"sglang": extend_baseline},
        "sample": {"sglang": sample_baseline},
        "moe_topk": {"sglang": moe_topk_baseline},
        "fused_experts": {"sglang": fused_experts_baseline},
    }
