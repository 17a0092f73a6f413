"""No import cycle between the modules of ``src/sparring``, counting the imports that run at import time.

Every module is parsed with :mod:`ast`; an import counts if it runs when the module is imported:
at module level, including inside module-level ``if``/``try`` blocks, but not inside a function
or class body's methods (a function-local import runs later, on purpose, and does not take part
in import order) and not under ``if TYPE_CHECKING:`` (never runs). ``from package import name``
counts as importing ``package.name`` when that is a module, else ``package`` (its ``__init__``),
as import-linter and pydeps count it.

A cycle is a strongly connected component of that graph with more than one module. Cycles still
present are listed in :data:`KNOWN_CYCLES` with why; the list may only shrink: a listed cycle that
no longer occurs as written (its modules changed) fails the test, so breaking one means deleting or
updating its entry.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from imports_support import PACKAGE, from_target, module_name, write_tree

SRC = Path(__file__).resolve().parents[1] / "src"

# The modules of each cycle (without the "sparring." prefix) -> why it is still here. Shrink only.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``body`` that run when the module is imported."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_nodes(node.body)
            yield from _import_time_nodes(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _import_time_nodes(block)
        elif isinstance(node, (ast.With, ast.AsyncWith, ast.ClassDef)):
            # a class body runs at import time; its methods' bodies do not
            yield from _import_time_nodes(node.body)


def import_time_targets(source: str, module: str, is_package: bool) -> Iterator[str]:
    """Dotted names ``source`` imports at import time: the module, and ``module.name`` per imported name."""
    for node in _import_time_nodes(ast.parse(source).body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        else:
            target = from_target(node, module, is_package)
            for alias in node.names:  # resolved by import_graph: the submodule if there is one, else target
                yield f"{target}.{alias.name}"


def import_graph(src: Path) -> dict[str, set[str]]:
    """module -> the sparring modules it imports at import time (names without the package prefix)."""
    paths = {module_name(p, src): p for p in sorted((src / PACKAGE).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        edges = set()
        for target in import_time_targets(path.read_text(), module, path.name == "__init__.py"):
            # `from pkg import name`: the module pkg.name if there is one, else pkg itself
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.add(target)
        graph[module] = edges
    return {
        m.removeprefix(PACKAGE).lstrip("."): {t.removeprefix(PACKAGE).lstrip(".") for t in ts}
        for m, ts in graph.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            child = next(it, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.add(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(frozenset(component))
    return out


def _show(c: frozenset[str]) -> str:
    return "{" + ", ".join(sorted(c)) + "}"


def test_no_import_cycle_between_modules() -> None:
    new = [c for c in cycles(import_graph(SRC)) if c not in KNOWN_CYCLES]
    assert not new, "import cycles (modules importing each other at import time):\n" + "\n".join(
        _show(c) for c in new
    )


def test_known_cycles_only_shrink() -> None:
    found = set(cycles(import_graph(SRC)))
    gone = [_show(c) for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"no longer a cycle as listed, so delete or update the KNOWN_CYCLES entry: {gone}"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # two modules importing each other at module level
        ({"a.py": "from sparring import b\n", "b.py": "import sparring.a\n"}, [{"a", "b"}]),
        # through a relative import and a name that is not a module, three long
        ({"x/__init__.py": "", "x/p.py": "from .q import f\n", "x/q.py": "from sparring.x.r import g\n",
          "x/r.py": "try:\n    from sparring.x import p\nexcept ImportError:\n    pass\n"},
         [{"x.p", "x.q", "x.r"}]),
        # a function-local import and a TYPE_CHECKING import do not count
        ({"a.py": "def f():\n    from sparring import b\n",
          "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sparring import a\n"}, []),
        # one side local only: no cycle
        ({"a.py": "from sparring.b import x\n", "b.py": "def g():\n    import sparring.a\n"}, []),
    ],
)  # fmt: skip
def test_a_cycle_is_found_only_when_it_runs_at_import_time(
    tmp_path: Path, files: dict[str, str], expected: list[set[str]]
) -> None:
    assert [set(c) for c in cycles(import_graph(write_tree(tmp_path, files)))] == expected
