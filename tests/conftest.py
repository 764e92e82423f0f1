"""Test session set-up: interpreter on CPU-only machines, hypothesis profiles.

TRITON_INTERPRET must be set before any kernel module is imported (Triton
decides at decoration time), hence at conftest import.
"""

import os

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"

from hypothesis import HealthCheck, settings  # noqa: E402

# The interpreter is slow: few examples, no deadline. CI derandomizes so a
# red run is reproducible; locally, HYPOTHESIS_PROFILE=explore searches more.
settings.register_profile(
    "default",
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True, print_blob=True)
settings.register_profile("explore", parent=settings.get_profile("default"), max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))
