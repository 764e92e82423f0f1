"""Time a call: warm-up, then the median of synchronised repeats.

Device events are used where the target's events are reliable. Kunlun's
stack returns 0 from event timing, so there (and on the CPU) we time the wall
clock around a synchronised call; an event time of 0 also falls back to it
instead of dividing by zero.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..runtime import capabilities, current_target


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    repeats: int
    clock: str  # "events" or "wall"


def _synchronize(device_type: str) -> None:
    if device_type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_wall(fn, repeat: int, device_type: str) -> list[float]:
    times = []
    for _ in range(repeat):
        _synchronize(device_type)
        start = time.perf_counter()
        fn()
        _synchronize(device_type)
        times.append(time.perf_counter() - start)
    return times


def _time_events(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def time_call(fn, warmup: int = 3, repeat: int = 10) -> Timing:
    target = current_target()
    for _ in range(warmup):
        fn()
    _synchronize(target.device_type)
    use_events = (
        target.device_type == "cuda" and torch.cuda.is_available() and capabilities(target).timing_events_reliable
    )
    if use_events:
        times = _time_events(fn, repeat)
        if min(times) > 0:
            return Timing(statistics.median(times), min(times), repeat, "events")
    times = _time_wall(fn, repeat, target.device_type)
    return Timing(statistics.median(times), min(times), repeat, "wall")
