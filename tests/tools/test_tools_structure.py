"""kunlun_triton/tools/ keeps the project's structure rules: no import circle
between its modules (imports inside functions count: a deferred import only
hides a circle), and no module over 400 lines. The oracle is the source text
itself, parsed with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

import kunlun_triton

PACKAGE = Path(kunlun_triton.__file__).parent
TOOLS = PACKAGE / "tools"
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set) -> set:
    """The kunlun_triton modules `path` imports anywhere in its body (module or function level)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in modules}
    found.discard(name)
    return found


def _graph() -> dict:
    paths = sorted(TOOLS.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


def _cycle(graph: dict):
    """One import circle as a list of modules, or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_checker_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_in_tools():
    graph = _graph()
    assert "kunlun_triton.tools.gguf.convert" in graph and graph["kunlun_triton.tools.convert_weights"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_no_tools_module_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in TOOLS.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
