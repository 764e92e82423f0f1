"""NGRAM speculative decoding on the kunlun platform (SGLang 0.5.23): the
verify tree's bookkeeping op routed to SGLang's own Triton implementation.

NGRAM has no draft model: SGLang's worker (``srt/speculative/ngram_worker.py``)
looks the request's last tokens up in an n-gram corpus (a C++ module SGLang
JIT-builds with the host compiler: ``kernels/ops/speculative/ngram_corpus.py``),
gets a draft tree (tokens + an n x n ancestor mask) and verifies it as one
TARGET_VERIFY extend with the tree's mask, which our attention backend runs
(``extend_attention(custom_mask=)``). Between the two it derives each draft
token's position and the tree walk's links (``retrieve_next_token`` /
``retrieve_next_sibling``) from the mask:
``reconstruct_tree.reconstruct_indices_from_tree_mask_func``. Bookkeeping,
not attention.

SGLang 0.5.23 picks that op at import time: the CUDA/HIP JIT module when torch
reports a GPU, its Triton kernel on Intel XPU, else the compiled
``sgl_kernel.speculative`` op. On the kunlun platform's CPU development mode
(and wherever ``sgl_kernel`` cannot load: its CUDA wheel needs libcuda) that
last import fails, and with it the import of the NGRAM worker. So:

- `import_reconstruct_tree` imports SGLang's module with a stand-in for the
  one name it takes from ``sgl_kernel.speculative``, present in
  ``sys.modules`` only for the duration of that import (``sgl_kernel`` itself
  is never faked: other SGLang code tests whether it is installed);
- the AROUND hook `reconstruct_tree_triton` on the module's dispatcher runs
  ``reconstruct_indices_from_tree_mask_triton`` (SGLang's Triton kernel, its
  XPU path) on every target, as the EAGLE tree kernels are routed
  (``speculative.py``). Scope: platform.
"""

from __future__ import annotations

import importlib
import sys
import types

RECONSTRUCT_MODULE = "sglang.kernels.ops.speculative.reconstruct_tree"
RECONSTRUCT_HOOK = f"{RECONSTRUCT_MODULE}.reconstruct_indices_from_tree_mask_func"
_SGL_KERNEL_OP = "sgl_kernel.speculative"


def _reconstruct_via_triton(*args, **kwargs):
    """What SGLang's module binds as ``reconstruct_indices_from_tree_mask`` when
    imported through `import_reconstruct_tree`: its own Triton kernel (the
    dispatcher is hooked to it anyway; this keeps a direct call lossless)."""
    return sys.modules[RECONSTRUCT_MODULE].reconstruct_indices_from_tree_mask_triton(*args, **kwargs)


def import_reconstruct_tree():
    """SGLang's ``reconstruct_tree`` module, or None where this SGLang has none.
    A plain import first; where it fails on ``sgl_kernel`` (not installed, or
    a CUDA build without libcuda), again with ``sgl_kernel.speculative``
    standing for that one op during the import only, then removed: ``import
    sgl_kernel`` keeps failing as before. (SGLang 0.5.21's module imports
    plainly but has no dispatcher: install.py leaves it alone.)"""
    try:
        return importlib.import_module(RECONSTRUCT_MODULE)
    except ModuleNotFoundError as err:
        if err.name and not err.name.startswith("sgl_kernel"):
            return None  # the SGLang module itself is absent
        first = err
    except ImportError as err:  # sgl_kernel present but cannot load (common_ops, libcuda)
        first = err
    if _SGL_KERNEL_OP in sys.modules:
        raise first  # a real sgl_kernel.speculative is loaded and still failed: not ours to hide
    standin = types.ModuleType(_SGL_KERNEL_OP, "kunlun-triton's import-time stand-in (ngram.py)")
    standin.reconstruct_indices_from_tree_mask = _reconstruct_via_triton
    sys.modules[_SGL_KERNEL_OP] = standin
    try:
        return importlib.import_module(RECONSTRUCT_MODULE)
    finally:
        if sys.modules.get(_SGL_KERNEL_OP) is standin:
            del sys.modules[_SGL_KERNEL_OP]


def worker_imports() -> bool:
    """Whether SGLang's NGRAM worker can import its tree op here: through the
    dispatcher this module routes (SGLang 0.5.22+), or, where the SGLang has
    none (0.5.21's worker imports ``sgl_kernel.speculative`` itself off CUDA /
    XPU), from an ``sgl_kernel`` that loads. `support.py` refuses NGRAM at
    start-up where neither holds."""
    module = import_reconstruct_tree()
    if module is not None and hasattr(module, "reconstruct_indices_from_tree_mask_func"):
        return True
    try:
        importlib.import_module(_SGL_KERNEL_OP)
    except Exception:  # not installed, or a CUDA build that cannot load here
        return False
    return True


def reconstruct_tree_triton(original, tree_mask, verified_seq_len, positions, retrieve_index, retrieve_next_token,
                            retrieve_next_sibling, batch_size, draft_token_num):  # fmt: skip
    """AROUND hook on ``reconstruct_indices_from_tree_mask_func``: SGLang's
    Triton kernel (positions and the retrieve_* walks, in place; one program
    per request over its n x n mask)."""
    module = sys.modules[RECONSTRUCT_MODULE]
    module.reconstruct_indices_from_tree_mask_triton(tree_mask, verified_seq_len, positions, retrieve_index,
                                                     retrieve_next_token, retrieve_next_sibling, batch_size,
                                                     draft_token_num)  # fmt: skip
