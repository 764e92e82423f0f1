"""What kunlun-triton is called inside SGLang: the platform's entry-point
names, the backend names its server arguments take, the fused-op dispatch
key, and the platform classes SGLang is handed. A leaf: every other module
of the plugin reads these here (the install table, the platform classes,
the activation, the draft backends)."""

PLATFORM_NAME = "kunlun"
ALTERNATE_NAME = "kunlun_triton"  # the entry-point name no other distribution claims (conflicts.py)
ATTENTION_BACKEND = "kunlun_triton"  # --attention-backend
SAMPLING_BACKEND = "kunlun_triton"  # --sampling-backend
DISPATCH_KEY = "kunlun"  # BaseFusedOp.register_oot_forward's key, the platform's get_dispatch_key_name
DEVICE_PLATFORM = "kunlun_triton.sglang_plugin.platform.classes:KunlunPlatform"
DEV_PLATFORM = "kunlun_triton.sglang_plugin.platform.classes:KunlunDevPlatform"
LOGGER = "kunlun_triton.sglang_plugin"
