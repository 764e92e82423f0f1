"""Device-free cost of the gated-delta-net kernels at Qwen3-Next-80B-A3B dims
(16 key heads, 32 value heads, head dims 128, bf16, fp32 state) on sm_90,
side by side with SGLang's FLA kernels for the same jobs, planned by SGLang's
own launchers on meta tensors and compiled ahead of time in the same run.

Run in the SGLang environment: python scripts/gdn_cost.py
Per-token figures: warp-instructions = static SASS x warps x programs a token
needs (decode: one token per request; prefill: its two kernels, the
per-(chunk, value head) solve and the state pass's chunk loop). The counted
comparison is `kunlun-triton inspect linear_attention --compare sglang`
(docs/linear-attention-cost.md)."""

import torch

from kunlun_triton.introspect import compile_ahead_of_time
from kunlun_triton.introspect.launches import meta_kernel_specs
from kunlun_triton.introspect.sass import kernel_cost
from kunlun_triton.ops.spec import planned_kernels
from kunlun_triton.runtime import Target, targeting

SM90 = Target("cuda", "sm_90", "meta", "gdn_cost")
H, HV, K, V = 16, 32, 128, 128


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def costs(specs):
    out = []
    for r in compile_ahead_of_time(specs, ("cuda",), artifacts=True):
        if not r["ok"]:
            out.append((r["spec"].name, {"error": r["error"][:120]}, r["spec"]))
            continue
        out.append((r["spec"].name, kernel_cost(r), r["spec"]))
    return out


def show(label, rows):
    for name, c, spec in rows:
        if "error" in c:
            print(f"{label:6} {name:48} ERROR {c['error']}")
            continue
        loops = [l["instructions"] for l in c.get("loops") or []]
        warps = c["num_warps"]
        print(f"{label:6} {name:48} regs {c['regs']:4} spill {c['spill_bytes']:5} sass {c['sass_total']:6} "
              f"warps {warps} loops {loops}")


def fla_decode(batch):
    from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import fused_sigmoid_gating_delta_rule_update

    q, k, v = meta(1, batch, H, K), meta(1, batch, H, K), meta(1, batch, HV, V)
    a, b = meta(batch, HV), meta(batch, HV)
    return meta_kernel_specs(lambda: fused_sigmoid_gating_delta_rule_update(
        A_log=meta(HV, dtype=torch.float32), a=a, dt_bias=meta(HV, dtype=torch.float32), softplus_beta=1.0,
        softplus_threshold=20.0, q=q, k=k, v=v, b=b, initial_state_source=meta(batch + 1, HV, V, K, dtype=torch.float32),
        initial_state_indices=meta(batch, dtype=torch.int32), use_qk_l2norm_in_kernel=True,
        cu_seqlens=meta(batch + 1, dtype=torch.int32)))


def fla_prefill(tokens):
    from sglang.kernels.ops.attention.fla.chunk import chunk_gated_delta_rule

    return meta_kernel_specs(lambda: chunk_gated_delta_rule(
        q=meta(1, tokens, H, K), k=meta(1, tokens, H, K), v=meta(1, tokens, HV, V), g=meta(1, tokens, HV, dtype=torch.float32),
        beta=meta(1, tokens, HV), initial_state=meta(2, HV, V, K, dtype=torch.float32),
        initial_state_indices=meta(1, dtype=torch.int32), use_qk_l2norm_in_kernel=True))


def main():
    print("# decode, batch 64 (state floor per token: 2 x 32 x 128 x 128 x 4 B = 4 MiB: read once, written once)")
    ours = costs(planned_kernels("gated_delta_rule_decode", {"batch": 64}, torch.bfloat16, SM90))
    show("ours", ours)
    with targeting(SM90):
        try:
            show("fla", costs(fla_decode(64)))
        except Exception as e:  # report, do not hide
            print("fla decode: could not plan:", repr(e)[:300])
    print("# prefill, one request of 4096 tokens")
    show("ours", costs(planned_kernels("gated_delta_rule_prefill", {"lengths": (4096,)}, torch.bfloat16, SM90)))
    show("ours-kunlun-sum", costs(planned_kernels("gated_delta_rule_prefill", {"lengths": (4096,)}, torch.bfloat16,
                                                  Target("kunlun", "p800", "meta", "gdn_cost"))))
    with targeting(SM90):
        try:
            show("fla", costs(fla_prefill(4096)))
        except Exception as e:
            print("fla prefill: could not plan:", repr(e)[:300])
    print("# conv")
    show("ours", costs(planned_kernels("causal_conv1d", {"lengths": (4096,)}, torch.bfloat16, SM90)))
    show("ours", costs(planned_kernels("causal_conv1d_update", {"batch": 64}, torch.bfloat16, SM90)))


if __name__ == "__main__":
    main()
