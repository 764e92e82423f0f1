"""What each target can do, so ops and configs never guess.

Kunlun facts come from docs/design.md (the Kunlun Triton backend's own tests and
issues); they are reasoned, not measured here, since no card is reachable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .dtypes import FLOAT_DTYPES
from .target import TARGET_NAMES, Target, current_target, detect_target

# Launch keywords only Kunlun's Triton accepts. Passing them to another target
# is an error there, so ops hand every config through `launch_options`.
KUNLUN_LAUNCH_KNOBS = frozenset(
    {
        "buffer_size_limit",
        "isCloseOffsetAnalysis",
        "isCloseCoreTiling",
        "isCloseUnrollControl",
        "isCloseVectorization",
    }
)
GENERIC_LAUNCH_KNOBS = frozenset({"num_warps", "num_stages"})
# AMD's backend options (what SGLang passes its attention kernels on MI300).
HIP_LAUNCH_KNOBS = GENERIC_LAUNCH_KNOBS | {"waves_per_eu", "matrix_instr_nonkdim", "kpack"}


@dataclass(frozen=True)
class Capabilities:
    dtypes: frozenset  # tensor dtypes the kernels are trusted with
    has_dot: bool  # tl.dot lowers and is right (else use tl.sum formulations)
    dot_bf16: bool  # tl.dot on bf16 operands is right (interpreter: garbage)
    has_atomics: bool
    num_warps_meaningful: bool
    bf16_complete: bool  # every op runs in bf16; else the dtype policy picks fp16
    timing_events_reliable: bool  # device events give nonzero elapsed times
    launch_knobs: frozenset = field(default=GENERIC_LAUNCH_KNOBS)
    # Masked loads may ignore `other=` (Kunlun): kernels then zero masked lanes
    # with tl.where after the load. A constexpr per target, never paid where
    # `other=` works (on CUDA/HIP that tl.where sends dot operands through
    # registers).
    load_ignores_other: bool = False
    # tl.dot on int8 operands accumulates exactly into int32 (int8_scaled_mm's
    # "dot" formulation; without it the dot runs on fp16 copies of the tiles,
    # exact per K step, then joins the int32 accumulator). sm_90 (IMMA) and
    # gfx942 (MFMA i8) have it; Kunlun's is unknown (and its config uses sum).
    dot_int8: bool = False
    # Launches replay a cached CompiledKernel through its own launcher when a
    # cheap key of the arguments has been seen, skipping Triton's binder
    # (ops/fast_launch.py; Triton's run(): 6-8 us a launch). Only where that Triton launch
    # path was checked: CUDA and HIP. Kunlun's Triton fork is not (its
    # JITFunction.run is its own), the interpreter has no binder.
    fast_launch: bool = False
    # e4m3fn's NaN code decoded by integer arithmetic, not a compare and select
    # (`ops.attention.fp8.fp8_half`): on gfx942 a compare's result is a 64-lane
    # mask held in scalar registers, and a tile's worth of them spilled (MLA
    # extend 64 x 16 over an fp8 pool: 15 scalar registers); on sm_90 the
    # compare is the cheaper (MLA fp8 extend 89 instructions a key against 103).
    fp8_nan_by_arithmetic: bool = False
    # -- what the target is, for code outside runtime/ (which never names one) --
    device: bool = False  # kernels run on a device (not the CPU)
    platform_card: bool = False  # the card the SGLang platform is named after (Kunlun)
    # Decode graphs: True always, None when the (vendor) torch build exposes
    # device graphs, False never (the CPU).
    device_graphs: bool | None = False
    collective_backend: str = "gloo"  # torch.distributed backend for the target's device
    default_arch: str = ""  # the part planned for when none is named (inspect --target, AOT)
    # (backend, arch, warp size) of triton's GPUTarget for ahead-of-time compiles; None: none
    aot_target: tuple | None = None


_ALL_FLOATS = frozenset(FLOAT_DTYPES)

_PROFILES = {
    "cuda": Capabilities(_ALL_FLOATS, True, True, True, True, True, True, dot_int8=True, fast_launch=True,
                         device=True, device_graphs=True, collective_backend="nccl", default_arch="sm_90",
                         aot_target=("cuda", 90, 32)),  # fmt: skip
    "hip": Capabilities(_ALL_FLOATS, True, True, True, True, True, True, launch_knobs=HIP_LAUNCH_KNOBS,
                        dot_int8=True, fast_launch=True, fp8_nan_by_arithmetic=True, device=True,
                        device_graphs=True, collective_backend="nccl", default_arch="gfx942",
                        aot_target=("hip", "gfx942", 64)),  # fmt: skip
    # num_warps is ignored (a program maps to a cluster); atomics and the
    # dot->softmax->dot chain are known to break; events time to 0; bf16 is
    # incomplete on some ops.
    "kunlun": Capabilities(
        _ALL_FLOATS,
        has_dot=False,
        dot_bf16=False,
        has_atomics=False,
        num_warps_meaningful=False,
        bf16_complete=False,
        timing_events_reliable=False,
        launch_knobs=KUNLUN_LAUNCH_KNOBS,
        load_ignores_other=True,
        device=True,
        platform_card=True,
        device_graphs=None,  # when the vendor torch exposes them
        collective_backend="nccl",  # its torch registers its collective library (bkcl) under this name
        default_arch="p800",  # the only Kunlun Triton part today
    ),
    # triton 3.9 interpreter: tl.dot on bf16 returns garbage; fp16/fp32 fine.
    # int8 tl.dot into int32 is exact there (numpy integer matmul).
    "interpreter": Capabilities(_ALL_FLOATS, True, False, True, False, True, False, dot_int8=True,
                                default_arch="cpu"),  # fmt: skip
    "torch": Capabilities(_ALL_FLOATS, False, False, False, False, True, False, default_arch="cpu"),
}


def capabilities(target: Target | None = None) -> Capabilities:
    return _PROFILES[(target or current_target()).name]


def profile(name: str) -> Capabilities:
    """The capability profile of the target called `name` (one of `TARGET_NAMES`)."""
    return _PROFILES[name]


def target_names_where(predicate) -> tuple[str, ...]:
    """The targets whose profile satisfies `predicate`, in `TARGET_NAMES` order."""
    return tuple(name for name in TARGET_NAMES if predicate(_PROFILES[name]))


def default_target(name: str, reason: str) -> Target:
    """Target `name` on its default part (`Capabilities.default_arch`), for
    planning without that device: ahead-of-time compiles, ``inspect --target``."""
    caps = _PROFILES[name]
    return Target(name, caps.default_arch, "cuda" if caps.device else "cpu", reason)


# What a target without a compiler of its own here (Kunlun: none reachable;
# the interpreter) compiles as ahead of time: CUDA sm_90, as a proxy.
AOT_PROXY = "cuda"
# {target: (backend, arch, warp size)} of triton's GPUTarget, for the targets that compile ahead of time
AOT_TARGETS = {name: caps.aot_target for name, caps in _PROFILES.items() if caps.aot_target}


def aot_name(target: Target) -> str:
    """The `AOT_TARGETS` name `target`'s plans compile for: its own where it
    has one, else `AOT_PROXY`'s."""
    return target.name if target.name in AOT_TARGETS else AOT_PROXY


def planning_target(target: Target | None = None) -> Target:
    """`target` (default: the current one) if it is a device target, else
    the proxy's default part (cuda sm_90): what a spec plans its kernels for
    under the interpreter, whose kernels never compile."""
    target = target or current_target()
    return target if capabilities(target).device else default_target(AOT_PROXY, "ahead-of-time compile")


def fast_launch_backend(backend: str) -> bool:
    """Whether launches through a Triton driver whose target backend is
    `backend` (``GPUTarget.backend``: "cuda", "hip", Kunlun's own name) may
    take the fast launch path: that target's profile says so; a backend with
    no profile here never does."""
    profile = _PROFILES.get(backend)
    return profile is not None and profile.fast_launch


# Units that run programs side by side (SMs, CUs, Kunlun clusters), by arch:
# what a split policy fills (decode's PROGRAMS_PER_UNIT x this). A real device
# reports its own count (`compute_units`); these serve ahead-of-time
# compilation (`kunlun-triton inspect --target`) and cards that hide theirs.
# sm_90: H100/H200 SXM (SGLang's backend reads 132 there); gfx942: MI300X;
# p800: Kunlun P800's 12 clusters (docs/design.md).
COMPUTE_UNITS = {"sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132, "sm_100": 148, "gfx942": 304,
                 "gfx950": 256, "p800": 12}  # fmt: skip
# A target whose arch is not above: its backend's usual part (cuda: an H100).
_DEFAULT_UNITS = {"cuda": 132, "hip": 304, "kunlun": 12, "interpreter": 1, "torch": 1}


def device_graphs(target_name: str) -> bool:
    """Decode graph capture on the target called `target_name`: its profile's
    answer, or for a card whose vendor torch may lack them (None), whether
    this torch build has real device graphs (`torch_exposes_device_graphs`)."""
    answer = _PROFILES[target_name].device_graphs
    return torch_exposes_device_graphs() if answer is None else answer


def torch_exposes_device_graphs() -> bool:
    """The torch build has real device graphs: ``torch.cuda.CUDAGraph``, the
    capture-state query SGLang's runner uses, and a compiled ``_CUDAGraph``
    (a build without them has torch's dummy class from ``torch._utils``).
    Touches no device: a CUDA context made here would poison SGLang's fork."""
    cuda = getattr(torch, "cuda", None)
    if not all(hasattr(cuda, name) for name in ("CUDAGraph", "graph", "is_current_stream_capturing")):
        return False
    compiled = getattr(torch._C, "_CUDAGraph", None)
    return compiled is not None and getattr(compiled, "__module__", "") != "torch._utils"


def native_fp8(target: Target | None = None) -> bool:
    """The target converts OCP fp8 (e4m3fn, e5m2) with instructions of its
    own: CUDA sm_89 and newer (``cvt`` e4m3x2 / e5m2x2 -> f16x2). There an
    fp8 KV pool's tiles are converted by Triton's cast, exact like the
    integer codec (`ops.attention.fp8`) and 2.2x fewer instructions per key
    in sm_90 decode; P800 has no fp8, gfx942's fp8 is the fnuz variant."""
    target = target or current_target()
    if target.name != "cuda" or not target.arch.startswith("sm_") or not target.arch[3:].isdigit():
        return False
    return int(target.arch[3:]) >= 89


def supports_pdl(target: Target | None = None) -> bool:
    """Programmatic dependent launch (a kernel starting while the one before
    it finishes, its reads behind ``gdc_wait``): CUDA sm_90 and newer, with a
    Triton that has ``tl.extra.cuda.gdc_wait`` and the ``launch_pdl`` option
    (what SGLang's decode uses between its two stages on Hopper)."""
    target = target or current_target()
    if target.name != "cuda" or not target.arch.startswith("sm_") or not target.arch[3:].isdigit():
        return False
    if int(target.arch[3:]) < 90:
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        from triton.language.extra import cuda
    except ImportError:
        return False
    return hasattr(cuda, "gdc_wait") and "launch_pdl" in getattr(CUDAOptions, "__dataclass_fields__", {})


def compute_units(target: Target | None = None) -> int:
    """SMs / CUs / clusters of `target` (default: the current one): the
    device's own count when it is the one this process runs on, else the
    arch's figure (`COMPUTE_UNITS`), else the backend's usual part."""
    target = target or current_target()
    caps = capabilities(target)
    if caps.device and not caps.platform_card and target == detect_target() and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
    return COMPUTE_UNITS.get(target.arch, _DEFAULT_UNITS.get(target.name, 1))


def launch_options(config: dict, target: Target | None = None) -> dict:
    """The lower-case launch keywords of `config` that `target` understands.

    Upper-case keys are kernel meta-parameters (constexprs) and are not
    returned; the launcher passes those by name.
    """
    caps = capabilities(target)
    return {k: v for k, v in config.items() if not k[:1].isupper() and k in caps.launch_knobs}


def run_dtype(dtype: torch.dtype, target: Target | None = None) -> torch.dtype:
    """The dtype a model asking for `dtype` should run in on `target`."""
    if dtype == torch.bfloat16 and not capabilities(target).bf16_complete:
        return torch.float16
    return dtype
