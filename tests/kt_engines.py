"""One ``sglang.Engine`` alive in the test process at a time, whoever starts it.

SGLang's ``Engine.shutdown()`` SIGKILLs every child process of the calling
process (``kill_process_tree(os.getpid(), include_parent=False)``), the
schedulers of any other engine included; that engine's subprocess watchdog
then answers its scheduler's death with SIGQUIT, whose handler SIGKILLs
pytest itself: exit 137 and no report (CI, stop 29: the session-scoped engine
of one module was still alive when the next module started and shut down its
own). So every engine the tests start goes through :func:`start`, which shuts
the previous one down first, and a shutdown runs at most once (a late second
one would kill the next engine's processes).
"""

from __future__ import annotations

import os

_live = None


def start(factory, *args, tp_size: int = 1, **kwargs):
    """``factory(*args, tp_size=tp_size, **kwargs)`` after shutting down the live engine."""
    global _live
    close()
    if tp_size > 1:
        # The ranks share the 2 CPU cores of a small machine; bind each to core 0.
        os.environ["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(["0"] * tp_size)
    else:
        os.environ.pop("SGLANG_CPU_OMP_THREADS_BIND", None)
    engine = factory(*args, tp_size=tp_size, **kwargs)
    shutdown_once = engine.shutdown

    def shutdown():
        global _live
        if _live is engine:
            _live = None
            shutdown_once()

    engine.shutdown = shutdown
    _live = engine
    return engine


def close():
    if _live is not None:
        _live.shutdown()


def is_live(engine) -> bool:
    return engine is not None and engine is _live


class EngineCache:
    """The engine for the last (model, options) asked, shared by the modules that
    ask for the same ones (a start is a minute or more on 2 cores); asking for
    others, or any test starting its own engine, shuts it down."""

    def __init__(self, factory, **defaults):
        self.factory, self.defaults = factory, defaults
        self.key, self.engine = None, None

    def get(self, path, **kwargs):
        key = (str(path), tuple(sorted(kwargs.items())))
        if key != self.key or not is_live(self.engine):
            self.engine = None
            self.engine = start(self.factory, str(path), **{**self.defaults, **kwargs})
            self.key = key
        return self.engine

    def close(self):
        engine, self.engine, self.key = self.engine, None, None
        if engine is not None:
            engine.shutdown()
