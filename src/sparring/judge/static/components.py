"""Static and maintainability components, computed on the host from the diff alone (nothing is executed).

* ``compiles``: fraction of the changed ``.py`` files that parse (as the interpreter parses them: from
  bytes, so a byte-order mark or a coding cookie is honoured; one that does not parse is also the
  zeroing flag ``unparseable_source``, :func:`sparring.judge.static.hacks.check_parses`).
* ``lint``: 1 if ruff (isolated, pinned rule set ``E9,F63,F7,F82``: syntax errors and
  undefined names) finds nothing in the changed files, decaying with the count.
* ``diff_size``: ``1 / (1 + changed_lines / 200)``: smaller changes score higher.
* ``complexity``: 1 if the changed files' branch count did not grow,
  ``1 / (1 + growth / 10)`` otherwise.

Raw numbers go to ``metrics`` (stored, never weighted directly).
"""

from __future__ import annotations

import ast
import difflib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sparring.judge.static.hacks import is_test_not_config, parse_source
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks import taskfs

RUFF_RULES = "E9,F63,F7,F82"
BRANCHES = (
    ast.If,
    ast.For,
    ast.While,
    ast.Try,
    ast.BoolOp,
    ast.IfExp,
    ast.comprehension,
    ast.Match,
    ast.With,
)


def ruff_exe() -> str | None:
    cand = Path(sys.executable).parent / "ruff"
    return str(cand) if cand.exists() else shutil.which("ruff")


def branches(data: bytes | None) -> int:
    tree = parse_source(data) if data else None
    if tree is None:
        return 0
    return sum(1 for n in ast.walk(tree) if isinstance(n, BRANCHES))


def _initial(initial: Path, rel: str) -> bytes | None:
    """A file of the initial state (a link followed only inside it: :mod:`sparring.tasks.taskfs`)."""
    return taskfs.read_file(initial, rel, follow_links=True)


def changed_lines(diff: WorkspaceDiff, initial: Path) -> int:
    n = 0
    for rel, data in diff.files.items():
        old = _initial(initial, rel) or b""
        try:
            a, b = old.decode("utf-8").splitlines(), data.decode("utf-8").splitlines()
        except UnicodeDecodeError:
            n += 1 + len(data) // 80  # binary: counted by size
            continue
        n += sum(
            1
            for ln in difflib.unified_diff(a, b, lineterm="", n=0)
            if ln[:1] in "+-" and ln[:3] not in ("+++", "---")
        )
    for rel in diff.deleted:
        before = _initial(initial, rel)
        n += len(before.splitlines()) if before is not None else 1
    return n


def lint_errors(files: dict[str, bytes]) -> int | None:
    """ruff findings over the given files (None when ruff is not installed)."""
    exe = ruff_exe()
    if exe is None or not files:
        return None if exe is None else 0
    with tempfile.TemporaryDirectory(prefix="sparring-lint-") as d:
        for rel, data in files.items():
            p = Path(d) / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        r = subprocess.run(
            [
                exe,
                "check",
                "--isolated",
                "--no-cache",
                "--select",
                RUFF_RULES,
                "--output-format",
                "concise",
                "--quiet",
                d,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    return sum(1 for ln in r.stdout.splitlines() if ln.strip() and ":" in ln)


def static_components(diff: WorkspaceDiff, initial: Path) -> tuple[dict[str, float], dict[str, float]]:
    """(components in [0, 1], raw metrics) of the diff's code outside the tests."""
    py = {r: d for r, d in diff.files.items() if r.endswith(".py") and not is_test_not_config(r)}
    ok = sum(1 for d in py.values() if branches(d) >= 0 and _parses(d))
    compiles = ok / len(py) if py else 1.0
    errs = lint_errors(py)
    lint = compiles if errs is None else 1.0 / (1.0 + errs)
    lines = changed_lines(diff, initial)
    growth = sum(branches(d) - branches(_initial(initial, r)) for r, d in py.items())
    comps = {
        "compiles": compiles,
        "lint": lint,
        "diff_size": 1.0 / (1.0 + lines / 200.0),
        "complexity": 1.0 if growth <= 0 else 1.0 / (1.0 + growth / 10.0),
    }
    metrics = {
        "changed_lines": float(lines),
        "branch_growth": float(growth),
        "lint_errors": float(errs if errs is not None else -1),
    }
    return comps, metrics


def _parses(data: bytes) -> bool:
    """Parsed from bytes as the interpreter does (a byte-order mark or coding cookie is not an error)."""
    return parse_source(data) is not None
