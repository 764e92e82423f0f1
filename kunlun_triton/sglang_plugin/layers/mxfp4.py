"""gpt-oss's MXFP4 experts on cards without FP4: ``--quantization mxfp4``
(the checkpoint's own ``quantization_config``) served by `fused_experts`
with ``use_mxfp4_w4a16``.

SGLang 0.5.23 offers ``mxfp4`` only where its CUDA / ROCm / XPU kernels run,
and its ``Mxfp4MoEMethod`` pads and swizzles for them. On the kunlun platform
`register_mxfp4_when_loaded` adds the name to SGLang's quantization table and
the platform hands `config_class` back for it (``get_quantization_config``):
SGLang's Mxfp4Config with `method_class` for the experts, which keep the
checkpoint's layout, 4-bit in memory (``w13_weight``
uint8 [E, 2I, H / 2] with gate and up rows interleaved, ``w2_weight``
[E, H, I / 2], e8m0 scales per 32 [E, N, K / 32], bf16 biases), filled by
gpt-oss's own MXFP4 loader (``_load_mxfp4_experts_weights``), and the GEMM
loops decode them (ops/moe/mxfp4.py). Attention and the other linear layers
stay in the model's dtype, as the checkpoint stores them.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys

import torch

MXFP4_GROUP = 32
QUANTIZATION_MODULE = "sglang.srt.layers.quantization"


def register_mxfp4_when_loaded() -> None:
    """``mxfp4`` among SGLang's quantization names, from the platform's
    activation. SGLang checks a checkpoint's quantization name against that
    table (``ModelConfig._verify_quantization``) before any platform hook
    runs, and the table's module cannot be imported while SGLang resolves its
    platform (it imports SGLang's kernels, which ask for the platform): so the
    name is added as soon as the module has loaded (`_AfterImport`), or now if
    it has."""
    module = sys.modules.get(QUANTIZATION_MODULE)
    if module is not None:
        _add_mxfp4(module)
    elif not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(QUANTIZATION_MODULE, _add_mxfp4))


def _add_mxfp4(module) -> None:
    module.QUANTIZATION_METHODS.setdefault("mxfp4", DeferredMxfp4Config)


class _Deferred(type):
    def __getattr__(cls, name):
        return getattr(config_class(), name)


class DeferredMxfp4Config(metaclass=_Deferred):
    """The table's entry: SGLang's config module is still loading when the
    name is added, so the class is built on first use (`config_class`; the
    platform's ``get_quantization_config`` hands that class out directly)."""


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` once `name` has been imported (and removes itself)."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


class _ThenLoader(importlib.abc.Loader):
    """The module's own loader, then `then(module)`."""

    def __init__(self, loader, then):
        self.loader, self.then = loader, then

    def __getattr__(self, name):  # get_source, is_package, ... as the wrapped loader answers them
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.then(module)


def quantization_config(name: str):
    """The platform's ``get_quantization_config``: ours for mxfp4, else None (SGLang's)."""
    return config_class() if name == "mxfp4" else None


# The classes are built on first use (function-level SGLang imports, as the
# rest of the seam: its quantization modules must not load while SGLang is
# still resolving its platform), once.
@functools.cache
def config_class():
    from sglang.srt.layers.moe.fused_moe_triton import FusedMoE
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    class KunlunMxfp4Config(Mxfp4Config):
        """SGLang's Mxfp4Config with our experts method (see the module doc)."""

        @classmethod
        def get_supported_act_dtypes(cls):
            return [torch.bfloat16, torch.float16, torch.float32]  # fused_experts decodes into any of them

        def get_quant_method(self, layer, prefix):
            if isinstance(layer, FusedMoE):
                if not self.is_checkpoint_mxfp4_serialized:
                    raise ValueError(
                        "kunlun-triton: online MXFP4 quantization of float experts is not served on the kunlun "
                        "platform; serve an MXFP4 checkpoint (gpt-oss's layout) or the float model."
                    )
                return method_class()()
            return super().get_quant_method(layer, prefix)

    return KunlunMxfp4Config


@functools.cache
def method_class():
    from sglang.srt.layers.moe.token_dispatcher import StandardCombineInput
    from sglang.srt.layers.quantization.base_config import FusedMoEMethodBase
    from sglang.srt.utils import set_weight_attrs

    from ..platform.mode import dev_mode

    class Mxfp4ExpertsMethod(FusedMoEMethodBase):
        """Packed e2m1 experts with e8m0 group scales, run by fused_experts."""

        def create_weights(self, layer, num_experts, hidden_size, intermediate_size_per_partition, params_dtype,
                           with_bias=False, **extra_weight_attrs):  # fmt: skip
            inter, experts = intermediate_size_per_partition, layer.num_local_experts
            if hidden_size % MXFP4_GROUP or inter % MXFP4_GROUP:
                raise ValueError(f"kunlun-triton: MXFP4 experts need hidden ({hidden_size}) and per-rank "
                                 f"intermediate ({inter}) sizes that are multiples of {MXFP4_GROUP}")  # fmt: skip
            shapes = {
                "w13_weight": ((experts, 2 * inter, hidden_size // 2), torch.uint8),
                "w13_weight_scale": ((experts, 2 * inter, hidden_size // MXFP4_GROUP), torch.uint8),
                "w2_weight": ((experts, hidden_size, inter // 2), torch.uint8),
                "w2_weight_scale": ((experts, hidden_size, inter // MXFP4_GROUP), torch.uint8),
            }
            if with_bias:
                shapes["w13_weight_bias"] = ((experts, 2 * inter), torch.bfloat16)
                shapes["w2_weight_bias"] = ((experts, hidden_size), torch.bfloat16)
            self.with_bias = with_bias
            for name, (shape, dtype) in shapes.items():
                param = torch.nn.Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False)
                layer.register_parameter(name, param)
                set_weight_attrs(param, extra_weight_attrs)
                if name.endswith("_scale"):
                    param.quant_method = "group"  # as SGLang's Mxfp4MoEMethod marks them for FusedMoE's loader

        def process_weights_after_loading(self, layer):
            pass  # the checkpoint's layout is the kernel's

        def create_moe_runner(self, layer, moe_runner_config):
            self.moe_runner_config = moe_runner_config

        def apply(self, layer, dispatch_output):
            from kunlun_triton import ops

            from .dp_attention import dp_gathered

            cfg = self.moe_runner_config
            topk = dispatch_output.topk_output
            out = ops.fused_experts(
                dispatch_output.hidden_states, layer.w13_weight, layer.w2_weight, topk.topk_weights, topk.topk_ids,
                activation=cfg.activation, apply_router_weight_on_input=bool(cfg.apply_router_weight_on_input),
                use_mxfp4_w4a16=True, w13_scale=layer.w13_weight_scale, w2_scale=layer.w2_weight_scale,
                b1=getattr(layer, "w13_weight_bias", None), b2=getattr(layer, "w2_weight_bias", None),
                gemm1_alpha=cfg.gemm1_alpha, gemm1_limit=cfg.gemm1_clamp_limit, check=dev_mode(),
                ids_may_be_invalid=layer.moe_ep_size > 1 or dp_gathered(),  # as layers/moe.py's experts
            )  # fmt: skip
            return StandardCombineInput(hidden_states=out)

    return Mxfp4ExpertsMethod
