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


def inspect_baselines() -> dict:
    """``{op: fn(shape, dtype) -> [KernelSpec]}``: SGLang's kernels for the
    op's job, planned for the active target the way SGLang's launchers plan
    them (`kunlun-triton inspect --compare sglang`)."""
    from .attention import decode_inspect_specs, extend_inspect_specs
    from .moe import fused_experts_inspect_specs, int8_scaled_mm_inspect_specs

    return {"decode_attention": decode_inspect_specs, "extend_attention": extend_inspect_specs,
            "fused_experts": fused_experts_inspect_specs, "int8_scaled_mm": int8_scaled_mm_inspect_specs}


def traffic_baselines() -> dict:
    """``{op: fn(shape, dtype) -> bytes}``: what one call of SGLang's kernels
    for the op moves, as its backend splits the work on an H200."""
    from .attention import decode_inspect_traffic, extend_inspect_traffic

    return {"decode_attention": decode_inspect_traffic, "extend_attention": extend_inspect_traffic}


def programs_baselines() -> dict:
    """``{op: fn(shape, dtype) -> programs}``: stage-1 programs with work in
    one call of SGLang's kernels, as its backend splits on an H200."""
    from .attention import decode_inspect_programs

    return {"decode_attention": decode_inspect_programs}


def launcher_baselines() -> dict:
    """``{op: fn(shape, dtype, device) -> call}``: SGLang's launcher for the
    op on real tensors of `shape`, its scratch allocated once as its backend
    does (for timing the launcher with launches stubbed)."""
    from .attention import decode_launcher_call, extend_launcher_call

    return {"decode_attention": decode_launcher_call, "extend_attention": extend_launcher_call}
