"""Make the Triton interpreter's calls of ``@triton.jit`` helpers cheap.

Triton's interpreter (3.8 and 3.9) re-patches ``triton.language`` on every
call of a jit helper from inside a kernel: ``inspect.getmembers`` over the
language modules, about 15 ms per call on the CI machines, although the
kernel's own launch already patched the same modules. A kernel that calls
helpers in a loop pays that per call and per program: most of the time the
sampling tests spent was this.

`skip_repeated_patching()` wraps the interpreter so a helper call skips the
patch when every language module its globals name was already patched by
the running kernel (what the repeat would do anyway); calls needing another
module still patch. It also turns the interpreter's integer-overflow
sanitiser off unless ``debug`` is on, as compiled kernels have it: it
recomputes every 32-bit integer add and multiply in int64 for an assert that
only debug mode checks (hash arithmetic wraps on purpose). Call it once
(tests do, in a conftest) with ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import dataclasses


class _NoScope:
    def restore(self):
        pass


def skip_repeated_patching() -> bool:
    """Install the wrapper; False where this Triton's interpreter does not
    have the expected shape (then nothing is changed)."""
    try:
        from triton.runtime import interpreter
    except Exception:
        return False
    real_patch = getattr(interpreter, "_patch_lang", None)
    executor = getattr(interpreter, "GridExecutor", None)
    if real_patch is None or executor is None or getattr(interpreter, "_kunlun_fast_patch", False):
        return bool(getattr(interpreter, "_kunlun_fast_patch", False))
    tl = interpreter.tl
    state = {"active": 0, "patched": set()}

    def langs_of(fn):
        return {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}

    def patch_lang(fn):
        if state["active"]:
            wanted = langs_of(fn)
            if wanted and wanted <= state["patched"]:
                return _NoScope()
            state["patched"] |= wanted
        return real_patch(fn)

    real_call = executor.__call__

    def call(self, *args, **kwargs):
        state["active"] += 1
        try:
            return real_call(self, *args, **kwargs)
        finally:
            state["active"] -= 1
            if not state["active"]:
                state["patched"] = set()

    interpreter._patch_lang = patch_lang
    executor.__call__ = call
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is not None and not getattr(options, "debug", True) and hasattr(options, "sanitize_overflow"):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    interpreter._kunlun_fast_patch = True
    return True
