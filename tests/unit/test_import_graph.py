"""The package's imports run one way, downward: no cycle, and the layers respected.

The graph is read from the source with :mod:`ast` (nothing is imported): an edge A → B for
every ``import``/``from … import`` in module A that names module B of headscope — at module
level *and* inside functions (a deferred import still ties A to B: it only hides a cycle until
the function runs). ``from pkg import name`` counts as an edge to ``pkg.name`` when that is a
module, else to ``pkg``. Imports inside ``if TYPE_CHECKING:`` count as well. The implicit
import of a module's parent packages is not an edge (a package ``__init__`` that re-exports
its submodules would otherwise be in a cycle with each of them); an explicit import of a
package is an edge to its ``__init__``.

Layers (lowest first): the shared base (``headscope._*``, corpus, shipped, stats), the model
core (``headscope.core``), the analyses (``layer0``, ``semantic``, ``maps``, ``reproduce``;
``planted`` and ``testing`` write checkpoints through the core), the presentation
(``report``, ``commands``, ``cli``) and the package's public ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "headscope"

ANALYSES = ("headscope.layer0", "headscope.semantic", "headscope.maps", "headscope.reproduce", "headscope.claims",
            "headscope.sweep")
PRESENTATION = ("headscope.report", "headscope.commands", "headscope.cli", "headscope.__main__")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules(pkg: Path) -> dict[str, Path]:
    return {_module_name(p, pkg.parent): p for p in sorted(pkg.rglob("*.py"))}


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """module → the package's modules it imports (every import statement, at any depth)."""
    modules = _modules(pkg)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if _is_package(path) else name.rsplit(".", 1)[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in modules:           # `import headscope.x.y` names a module or a package
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """The reader can fail: a deferred (function-level) import and a relative one are edges."""
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("import os\n\ndef f():\n    from .sub import b\n    return b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from .. import a\nfrom ..sub import c  # noqa\n")
    (pkg / "sub" / "c.py").write_text("import toy.a\n")
    graph = import_graph(pkg)
    assert graph["toy"] == {"toy.a"}
    assert graph["toy.a"] == {"toy.sub.b"}                  # inside a function; `import os` is not ours
    assert graph["toy.sub.b"] == {"toy.a", "toy.sub.c"}
    assert graph["toy.sub.c"] == {"toy.a"}
    assert _cycles(graph) == [["toy.a", "toy.sub.b", "toy.sub.c"]]


def test_the_graph_covers_this_package():
    graph = import_graph()
    assert {"headscope.core.entry", "headscope.core.model"} <= graph["headscope"]
    assert "headscope.core.families.gpt2" in graph["headscope.core.families"]


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" ↔ ".join(c) for c in cycles)


def _in(module: str, layer: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in layer)


@pytest.mark.parametrize("lower, upper, what", [
    (("headscope.core",), ANALYSES + PRESENTATION + ("headscope.planted", "headscope.testing"),
     "the model core imports no analysis, report or command"),
    (ANALYSES, PRESENTATION, "the analyses import no report, command or CLI code"),
    (("headscope._atomic", "headscope._input", "headscope._json", "headscope._errors", "headscope._memory", "headscope.corpus",
      "headscope.shipped", "headscope.stats", "headscope.lowrank", "headscope._version"),
     ("headscope.core",) + ANALYSES + PRESENTATION + ("headscope.planted", "headscope.testing"),
     "the shared base imports nothing above it"),
])
def test_layering(lower, upper, what):
    graph = import_graph()
    bad = sorted(f"{a} → {b}" for a, targets in graph.items() if _in(a, lower)
                 for b in targets if _in(b, upper))
    assert not bad, f"{what}: " + ", ".join(bad)
