"""The package's import graph, read from the source (no import is run, no
SGLang needed): no import circle among kunlun_triton's modules, counting
function-level imports too (a circle closed inside a function still ties
the two modules together for a reader and breaks when one moves), and no
module importing state from an enclosing package's ``__init__`` (a
package's ``__init__`` re-exports its children; a child reading names back
from it is a circle in disguise: the state gets its own module).

Edges: ``import a.b`` and ``from a.b import c`` give a.b, or a.b.c where c
is a module. A module's import of an enclosing package itself is not an
edge (Python imports the parents of every module anyway); importing a
*name* from one is what the second test refuses."""

from __future__ import annotations

import ast
from pathlib import Path

import kunlun_triton

ROOT = Path(kunlun_triton.__file__).resolve().parent
PACKAGE = ROOT.name


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = (PACKAGE, *path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(name: str) -> str | None:
    """The longest known module `name` starts with (None: not ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str):
    """(line, imported module, names taken from it) for each import statement of module `name`."""
    path = MODULES[name]
    package = name if _is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield node.lineno, module, tuple(alias.name for alias in node.names)


def _edges(name: str) -> set[str]:
    out = set()
    for _, module, names in _imports(name):
        for target in [module, *(f"{module}.{n}" for n in names)]:
            found = _resolve(target)
            if found is None or found == name:
                continue
            if name.startswith(found + ".") and _is_package(found):
                continue  # an enclosing package: the state test's business
            out.add(found)
    return out


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_the_package():
    """The graph is read from the tree: its known seams are there."""
    graph = {name: _edges(name) for name in MODULES}
    assert len(MODULES) > 100
    assert "kunlun_triton.ops.attention.decode_kernels" in graph["kunlun_triton.ops.attention.decode_attention"]
    assert "kunlun_triton.sglang_plugin.install" in graph["kunlun_triton.sglang_plugin.platform.activation"]


def test_no_import_circle():
    graph = {name: _edges(name) for name in MODULES}
    circles = _circles(graph)
    shown = []
    for component in circles:
        members = set(component)
        lines = [f"  {a} -> {b}" for a in component for b in sorted(graph[a] & members)]
        shown.append("\n".join([" + ".join(component), *lines]))
    assert not circles, "import circles (module- or function-level imports):\n" + "\n\n".join(shown)


def test_no_module_reads_state_from_an_enclosing_package_init():
    found = []
    for name in MODULES:
        for line, module, names in _imports(name):
            if not names or module == name or not name.startswith(module + ".") or module not in MODULES:
                continue
            if not _is_package(module):
                continue
            for taken in names:
                if f"{module}.{taken}" not in MODULES:  # a name of the __init__, not a submodule
                    found.append(f"{MODULES[name].relative_to(ROOT.parent)}:{line}: from {module} import {taken}")
    assert not found, "modules reading names from an enclosing package's __init__:\n" + "\n".join(found)
