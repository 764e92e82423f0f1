"""Target detection, capability profiles, dispatch and config lookup."""

from .capabilities import Capabilities, capabilities, launch_options, run_dtype
from .config import ConfigError, clear_config_cache, get_config
from .dispatch import DispatchError, dispatch_report, record_dispatch, reset_dispatch_report, use_triton
from .log import logger
from .target import Target, current_target, detect_target

__all__ = [
    "Capabilities",
    "ConfigError",
    "clear_config_cache",
    "DispatchError",
    "Target",
    "capabilities",
    "current_target",
    "detect_target",
    "dispatch_report",
    "get_config",
    "launch_options",
    "logger",
    "record_dispatch",
    "reset_dispatch_report",
    "run_dtype",
    "use_triton",
]
