"""The code that runs inside the candidate's sandbox imports only the standard library and pytest.

It runs with the candidate's workspace on the path, under the interpreter of the task's
environment: anything else it imported could be served from the workspace or be absent there.
Every module of :mod:`sparring.judge.inside` is checked (the package is the list), its
``__init__`` included; a host module of the judge imported from there is named as such.
"""

from __future__ import annotations

import ast
import sys
from importlib import resources

from sparring.judge.inside import module_files

ALLOWED_THIRD_PARTY = {"pytest", "_pytest", "pluggy"}
SIBLINGS = {name.removesuffix(".py") for name in module_files()}  # staged side by side in the sandbox
INSIDE = "sparring.judge.inside"


def imports(source: str) -> set[str]:
    """Every absolute module name ``source`` imports, anywhere in it (``from X import y`` gives X and X.y)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def foreign(source: str) -> set[str]:
    """What ``source`` imports beyond the standard library, pytest and the inside package itself."""
    out = set()
    for name in imports(source):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or top in SIBLINGS:
            continue
        if name == INSIDE or name.startswith(INSIDE + "."):
            continue
        if name in {"sparring", "sparring.judge"}:  # the parents of `from sparring.judge.inside import x`
            continue
        out.add(top if top != "sparring" else name)
    return out


def test_the_inside_package_lists_its_modules():
    assert {"judge_launcher.py", "judge_driver.py", "judge_observe.py", "judge_imports.py"} <= set(
        module_files()
    )
    assert "__init__.py" not in module_files()


def test_inside_modules_import_only_stdlib_pytest_and_each_other():
    pkg = resources.files(INSIDE)
    for name in (*module_files(), "__init__.py"):
        bad = foreign(pkg.joinpath(name).read_text())
        assert not bad, (
            f"inside/{name} imports {sorted(bad)}: the candidate's sandbox has only the stdlib and pytest"
        )


def test_the_check_sees_a_foreign_import():
    # positive control: the same check flags a host module of the judge, another Sparring module and a third party
    src = "import os\nfrom sparring.judge import base\nimport sparring.tasks\nimport numpy as np\n"
    assert foreign(src) == {"sparring.judge.base", "sparring.tasks", "numpy"}
    assert foreign("from sparring.judge.runner import sandbox\n") == {
        "sparring.judge.runner",
        "sparring.judge.runner.sandbox",
    }
    assert (
        foreign("def f():\n    import pytest\n    from collections import abc\n    import judge_observe\n")
        == set()
    )
    assert foreign("from sparring.judge.inside import judge_observe\n") == set()
