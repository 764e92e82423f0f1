"""Bench inputs built on first use and kept for one case at a time.

`bench` collects every case before running any, so a family that allocated
its tensors up front would hold all of them at once (GBs per case at 64k
rows). A `LazyInputs` builds its tensors when one of its case's impls first
runs and drops the previous case's, so only one case's inputs live at a time.
"""

from __future__ import annotations

_current: list = [None, None]  # [owner, inputs]


class LazyInputs:
    def __init__(self, make):
        self._make = make

    def get(self):
        if _current[0] is not self:
            _current[0], _current[1] = None, None  # free the previous case first
            _current[1] = self._make()
            _current[0] = self
        return _current[1]
