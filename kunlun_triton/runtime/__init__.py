"""Target detection, capability profiles, dispatch and config lookup."""

from .capabilities import Capabilities, capabilities, compute_units, launch_options, run_dtype
from .config import ConfigError, clear_config_cache, get_config, plan_cache
from .dispatch import DispatchError, dispatch_report, record_dispatch, reset_dispatch_report, use_triton
from .dtypes import FLOAT_DTYPES, INDEX_DTYPES, dtype_name
from .env import EnvError, env_choice, env_flag, env_float, env_str
from .log import logger
from .target import Target, current_target, detect_target, targeting

__all__ = [
    "FLOAT_DTYPES",
    "INDEX_DTYPES",
    "Capabilities",
    "ConfigError",
    "DispatchError",
    "EnvError",
    "Target",
    "capabilities",
    "compute_units",
    "clear_config_cache",
    "current_target",
    "detect_target",
    "dispatch_report",
    "dtype_name",
    "env_choice",
    "env_flag",
    "env_float",
    "env_str",
    "get_config",
    "launch_options",
    "logger",
    "plan_cache",
    "record_dispatch",
    "reset_dispatch_report",
    "run_dtype",
    "targeting",
    "use_triton",
]
