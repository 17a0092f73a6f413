"""What the import-graph tests share (tests/test_layering.py, tests/test_import_cycles.py): module names of
source files, the target of an ``import``/``from`` statement, and a throwaway package tree."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "sparring"


def module_name(path: Path, src: Path) -> str:
    """The dotted module name of ``path`` below ``src`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def from_target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module a ``from ... import`` statement of ``module`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def write_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A source root under ``tmp_path`` holding ``files`` (paths relative to the package)."""
    for rel, text in files.items():
        p = tmp_path / PACKAGE / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path
