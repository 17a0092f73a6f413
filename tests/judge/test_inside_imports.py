"""The code that runs inside the candidate's sandbox imports only the standard library and pytest.

It runs with the candidate's workspace on the path, under the interpreter of the task's
environment: anything else it imported could be served from the workspace or be absent there.
"""

from __future__ import annotations

import ast
import sys
from importlib import resources

from sparring.judge.sandbox_runner import IN_SANDBOX

ALLOWED_THIRD_PARTY = {"pytest", "_pytest", "pluggy"}
SIBLINGS = {name.removesuffix(".py") for name in IN_SANDBOX}  # staged side by side in the sandbox


def top_level_imports(source: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def foreign(source: str) -> set[str]:
    return {
        m
        for m in top_level_imports(source)
        if m not in sys.stdlib_module_names and m not in ALLOWED_THIRD_PARTY and m not in SIBLINGS
    }


def test_inside_modules_import_only_stdlib_and_pytest():
    pkg = resources.files("sparring.judge")
    assert IN_SANDBOX, "the list of inside modules is empty"
    for name in IN_SANDBOX:
        bad = foreign(pkg.joinpath(name).read_text())
        assert not bad, f"{name} imports {sorted(bad)} inside the candidate's sandbox"


def test_the_check_sees_a_foreign_import():
    # positive control: the same check flags a Sparring import and a third-party one
    assert foreign("import os\nfrom sparring.judge import base\nimport numpy as np\n") == {
        "sparring",
        "numpy",
    }
    assert foreign("def f():\n    import pytest\n    from collections import abc\n") == set()
