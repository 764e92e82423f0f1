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
only debug mode checks (hash arithmetic wraps on purpose). And the patch a
launch does need costs about 1 ms instead of 15: which members of each
language module are builtins is found once (``inspect.getmembers`` per
launch was 17% of a SmolLM2 decode step), the patching itself is unchanged.

`skip_host_copies()`: a launch whose tensors are all CPU tensors (the
interpreter target) runs on them as they are: the interpreter otherwise
re-views every argument and, after the grid, copies each argument's whole
storage onto itself (a KV pool layer per attention launch).

`speed_up_interpreter()` installs both; `kunlun_triton.runtime` does when it
selects the interpreter target, so tests, serving and tools all run with
them (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import dataclasses
import inspect


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

    langs: dict = {}  # function -> ids of the language modules its globals name

    def langs_of(fn):
        found = langs.get(fn)
        if found is None:
            found = langs[fn] = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        return found

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

    real_builtin = getattr(interpreter, "_patch_builtin", None)
    patch_attr = getattr(interpreter, "_patch_attr", None)
    # Which members of each module Triton patches are builtins, looked up
    # now, while nothing is patched (a patched member is a lambda, no builtin).
    patched_pkgs = [tl, tl.core, tl.tensor, getattr(tl, "math", None), getattr(tl.core, "tensor_descriptor_base", None)]
    builtins = {
        id(pkg): (pkg, [(n, m) for n, m in inspect.getmembers(pkg) if tl.core.is_builtin(m)])
        for pkg in patched_pkgs
        if pkg is not None
    }

    def patch_builtin(pkg, builder, scope):
        known = builtins.get(id(pkg))
        if known is None or known[0] is not pkg:
            return real_builtin(pkg, builder, scope)
        for name, member in known[1]:
            patch_attr(pkg, name, member, builder, scope)

    interpreter._patch_lang = patch_lang
    if real_builtin is not None and patch_attr is not None:
        interpreter._patch_builtin = patch_builtin
    executor.__call__ = call
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is not None and not getattr(options, "debug", True) and hasattr(options, "sanitize_overflow"):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    interpreter._kunlun_fast_patch = True
    return True


def _host_tensor(arg) -> bool:
    if isinstance(arg, tuple):
        return all(_host_tensor(a) for a in arg)
    if not hasattr(arg, "data_ptr"):
        return True
    import torch

    return type(arg) is torch.Tensor and arg.device.type == "cpu"


def skip_host_copies() -> bool:
    """Run launches on their CPU tensors in place; False where this Triton's
    interpreter does not have the expected shape (then nothing is changed)."""
    try:
        from triton.runtime import interpreter
    except Exception:
        return False
    executor = getattr(interpreter, "GridExecutor", None)
    if executor is None or not hasattr(executor, "_init_args_hst") or not hasattr(executor, "_restore_args_dev"):
        return False
    if getattr(executor, "_kunlun_in_place", False):
        return True
    real_init, real_restore = executor._init_args_hst, executor._restore_args_dev

    def init_args_hst(self, args_dev, kwargs):
        if all(map(_host_tensor, args_dev)) and all(map(_host_tensor, kwargs.values())):
            return list(args_dev), dict(kwargs)  # already on the host: the very tensors
        return real_init(self, args_dev, kwargs)

    def restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        if all(a is h for a, h in zip(args_dev, args_hst)) and all(kwargs[k] is kwargs_hst[k] for k in kwargs):
            return  # ran on the tensors themselves: nothing to copy back
        real_restore(self, args_dev, args_hst, kwargs, kwargs_hst)

    executor._init_args_hst = init_args_hst
    executor._restore_args_dev = restore_args_dev
    executor._kunlun_in_place = True
    return True


def speed_up_interpreter() -> bool:
    """Both speed-ups; True when both are installed."""
    return skip_repeated_patching() & skip_host_copies()
