"""Which Triton target lowers our kernels on this machine, and why.

Detection order (first match wins):
  1. ``KUNLUN_TRITON_TARGET`` (kunlun | cuda | hip | interpreter | torch);
  2. Kunlun: the vendor torch build ``torch_xmlir`` imports, or ``xpu-smi``
     answers. Kunlun's torch exposes its cards as device ``cuda``;
  3. the Triton interpreter when ``TRITON_INTERPRET=1``. It is checked before
     CUDA/HIP because Triton decides at ``@triton.jit`` time: with the variable
     set, even a GPU machine runs every kernel in the interpreter;
  4. CUDA or HIP: ``torch.cuda.is_available()``, HIP when ``torch.version.hip``;
  5. otherwise ``torch``: no Triton target, every op runs its torch reference.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import shutil
import subprocess
from dataclasses import dataclass

from .env import env_flag, env_str

TARGET_NAMES = ("kunlun", "cuda", "hip", "interpreter", "torch")


@dataclass(frozen=True)
class Target:
    name: str  # one of TARGET_NAMES
    arch: str  # "sm_90", "gfx942", "p800", "cpu", ... ("" when unknown)
    device_type: str  # torch device type the kernels' tensors live on
    reason: str  # one line a human can check

    def __hash__(self) -> int:  # a launch plan's cache key holds the target: hash it once
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = hash((self.name, self.arch, self.device_type, self.reason))
            object.__setattr__(self, "_hash", value)
            return value

    @property
    def is_triton(self) -> bool:
        return self.name != "torch"

    def __str__(self) -> str:
        arch = f" ({self.arch})" if self.arch else ""
        return f"{self.name}{arch}: {self.reason}"


def interpreter_enabled() -> bool:
    return env_flag("TRITON_INTERPRET", False)


def _kunlun_present() -> str | None:
    if importlib.util.find_spec("torch_xmlir") is not None:
        return "torch_xmlir (Kunlun's torch build) is importable"
    if shutil.which("xpu-smi"):
        try:
            done = subprocess.run(["xpu-smi"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode == 0:
            return "xpu-smi answered"
    return None


def _kunlun_arch() -> str:
    # P800 is the only Kunlun Triton part today; KUNLUN_TRITON_ARCH overrides.
    return env_str("KUNLUN_TRITON_ARCH", "p800")


def _gpu_arch(torch) -> str:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if getattr(torch.version, "hip", None):
        return getattr(props, "gcnArchName", "").split(":")[0]
    return f"sm_{props.major}{props.minor}"


def _forced(name: str) -> Target:
    if name not in TARGET_NAMES:
        raise ValueError(
            f"KUNLUN_TRITON_TARGET={name!r} is not a target; expected one of {', '.join(TARGET_NAMES)}"
        )
    device = "cpu" if name in ("interpreter", "torch") else "cuda"
    if name == "interpreter":
        _fix_interpreter()
    arch = env_str("KUNLUN_TRITON_ARCH", "p800" if name == "kunlun" else ("cpu" if device == "cpu" else ""))
    if name in ("cuda", "hip") and not env_str("KUNLUN_TRITON_ARCH"):
        import torch

        if torch.cuda.is_available():
            arch = _gpu_arch(torch)
    return Target(name, arch, device, "forced by KUNLUN_TRITON_TARGET")


def _fix_interpreter() -> None:
    """The interpreter target runs kernels as devices do: bf16 casts round to
    nearest even (`interpreter_bf16`; the interpreter truncates), and
    without the interpreter's per-launch waste (`interpreter_speed`).
    Patches only Triton's interpreter module: compiled targets never see it."""
    from .interpreter_bf16 import round_bf16_to_nearest_even
    from .interpreter_speed import speed_up_interpreter

    round_bf16_to_nearest_even()
    speed_up_interpreter()


@functools.lru_cache(maxsize=1)
def detect_target() -> Target:
    """Detect once per process; ``detect_target.cache_clear()`` re-detects."""
    forced = env_str("KUNLUN_TRITON_TARGET")
    if forced:
        return _forced(forced.lower())
    why = _kunlun_present()
    if why:
        return Target("kunlun", _kunlun_arch(), "cuda", why)
    import torch

    if interpreter_enabled():
        _fix_interpreter()
        return Target("interpreter", "cpu", "cpu", "TRITON_INTERPRET=1")
    if torch.cuda.is_available():
        if getattr(torch.version, "hip", None):
            return Target("hip", _gpu_arch(torch), "cuda", f"torch {torch.__version__} sees a ROCm GPU")
        return Target("cuda", _gpu_arch(torch), "cuda", f"torch {torch.__version__} sees a CUDA GPU")
    return Target(
        "torch", "cpu", "cpu", "no GPU, no Kunlun card and TRITON_INTERPRET unset: torch references only"
    )


_override: list[Target] = []


def current_target() -> Target:
    return _override[-1] if _override else detect_target()


@contextlib.contextmanager
def targeting(target: Target):
    """Within the block, `current_target()` is `target` (configs, capabilities
    and dispatch follow it). For tools that plan another target's launches
    on this machine (``kunlun-triton inspect``, lowering tests): a target
    whose ``device_type`` is ``"meta"`` runs the launchers on meta tensors,
    with the launches stubbed (`kunlun_triton.introspect.launches`)."""
    _override.append(target)
    try:
        yield target
    finally:
        _override.pop()
