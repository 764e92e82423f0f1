"""Shared by the regression tests (imported by name: tests/ is not a package)."""

from kunlun_triton.runtime.env import env_choice

# KUNLUN_TRITON_REGRESSION=full: the whole matrix; unset or quick: the CI slice
FULL = env_choice("KUNLUN_TRITON_REGRESSION", ("quick", "full"), "quick") == "full"
