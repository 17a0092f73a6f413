"""The judge version: a name plus a hash of the code and config that decide scores.

The code part is the *import closure* of the scoring code: every module of Sparring that the judge's
host side (:data:`SCORING_ROOTS`) or its in-sandbox side imports, directly or through other modules,
at module level or inside a function, together with the package ``__init__`` modules on the way.
The closure is found by reading the sources (no import runs), so it is the same in every process
and on every node. Editing any module in it changes the version; a module that no scoring path can
reach does not. A change that could move scores therefore always comes with a new version, and
every trajectory records the version that scored it. (A hand-kept list of modules missed some:
the version did not move when a module it forgot changed, the drift versioning exists to stop.)
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from importlib import resources
from typing import Any

from sparring import pyast
from sparring.judge.inside import module_files

BASE = "pytest-judge/3"
PACKAGE = "sparring"
SCORING_ROOTS = (
    "sparring.judge.pytest_judge",
    *(f"sparring.judge.inside.{name.removesuffix('.py')}" for name in module_files()),
)
"""Where scoring starts: the host-side judge and every module of :mod:`sparring.judge.inside` (they import
each other by bare name in the sandbox, which the closure cannot follow)."""


def _source(module: str) -> tuple[bytes, bool] | None:
    """(source bytes, whether it is a package) of a module of Sparring, or None when it is no such module."""
    parts = module.split(".")
    base = resources.files(PACKAGE)
    for part in parts[1:-1]:
        base = base.joinpath(part)
    if len(parts) == 1:
        candidates = [(base.joinpath("__init__.py"), True)]
    else:
        leaf = parts[-1]
        candidates = [(base.joinpath(f"{leaf}.py"), False), (base.joinpath(leaf, "__init__.py"), True)]
    for path, is_pkg in candidates:
        if path.is_file():
            return path.read_bytes(), is_pkg
    return None


def _imports(module: str, source: bytes, is_pkg: bool) -> set[str]:
    """Every Sparring module ``source`` names in an import statement, anywhere in it (relative ones resolved)."""
    tree = pyast.parse(source, filename=module)
    package = module if is_pkg else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return {name for name in out if name == PACKAGE or name.startswith(PACKAGE + ".")}


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


@functools.lru_cache(maxsize=4)
def scoring_closure(roots: tuple[str, ...] = SCORING_ROOTS) -> tuple[str, ...]:
    """The sorted names of every Sparring module reachable by imports from ``roots`` (parent packages included)."""
    seen: dict[str, bytes] = {}
    todo = [name for root in roots for name in _with_parents(root)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        found = _source(name)
        if found is None:  # `from sparring.x import name` where name is not a module
            continue
        source, is_pkg = found
        seen[name] = source
        for imported in _imports(name, source, is_pkg):
            todo.extend(n for n in _with_parents(imported) if n not in seen)
    return tuple(sorted(seen))


def code_digest(roots: tuple[str, ...] = SCORING_ROOTS) -> str:
    """sha256 over the name and bytes of every module in :func:`scoring_closure`."""
    h = hashlib.sha256()
    for name in scoring_closure(roots):
        found = _source(name)
        assert found is not None
        h.update(name.encode() + b"\0" + found[0] + b"\0")
    return h.hexdigest()


def environment() -> dict[str, str]:
    """What outside the judge's code can move a score: the interpreter, pytest, whether ruff is there."""
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from sparring.judge.static.components import ruff_exe

    try:
        pytest_version = version("pytest")
    except PackageNotFoundError:
        pytest_version = "absent"
    return {"python": ".".join(map(str, sys.version_info[:3])), "pytest": pytest_version,
            "ruff": "present" if ruff_exe() else "absent"}  # fmt: skip


def judge_version(config: dict[str, Any]) -> str:
    """``pytest-judge/3+<12 hex>`` over the scoring code's closure, ``config`` and :func:`environment`."""
    h = hashlib.sha256(code_digest().encode())
    h.update(json.dumps(config, sort_keys=True).encode())
    h.update(json.dumps(environment(), sort_keys=True).encode())
    return f"{BASE}+{h.hexdigest()[:12]}"
