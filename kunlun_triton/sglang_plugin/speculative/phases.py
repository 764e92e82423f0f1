"""What each speculative phase ran (the dispatch report's "speculative").

Counted by our attention backend per layer call (this scheduler process):
target_verify (extend_attention with the tree mask, or causal for a chain),
draft_extend (extend_attention), draft_decode (decode_attention), store_kv
in each; "forwards" and "requests" count the phase's batches and their rows.

A leaf: the attention backend counts here, the report reads here.
"""

from __future__ import annotations

_PHASES: dict = {}


def note_forward(phase: str, requests: int) -> None:
    entry = _PHASES.setdefault(phase, {"forwards": 0, "requests": 0, "ops": {}})
    entry["forwards"] += 1
    entry["requests"] += int(requests)


def note_op(phase: str, op: str) -> None:
    ops = _PHASES.setdefault(phase, {"forwards": 0, "requests": 0, "ops": {}})["ops"]
    ops[op] = ops.get(op, 0) + 1


def speculative_report() -> dict:
    """{phase: {"forwards", "requests", "ops": {op: layer calls}}}."""
    return {phase: {**entry, "ops": dict(entry["ops"])} for phase, entry in _PHASES.items()}


def reset_speculative_report() -> None:
    _PHASES.clear()
