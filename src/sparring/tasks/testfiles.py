"""What counts as a visible test file in a task's workspace: one predicate for every room.

Admission (the ``delete_tests`` and ``hardcode`` hacks), the red team's hack
catalogue and the judge's tamper checks all ask the same question, so they ask
it here. The answer is the union of what pytest would treat as test code:

- anything under a ``tests/``, ``test/`` or ``testing/`` directory;
- ``test_*`` files (any extension: fixtures such as ``test_input.txt`` too) and
  ``*_test.py`` modules anywhere;
- ``conftest.py`` anywhere (pytest loads it with the tests; changing it changes
  what the tests do, so it is test code, even if it holds no test).

It lives in tasks/ (the bottom room, beside the workspace layout it describes)
so that admission and the judge can both import it.
"""

from __future__ import annotations

from pathlib import PurePosixPath

TEST_DIRS = frozenset({"tests", "test", "testing"})


def is_test_path(rel: str) -> bool:
    """True for a workspace-relative path that is test code (see the module docstring)."""
    p = PurePosixPath(rel)
    name = p.name
    return (
        any(part in TEST_DIRS for part in p.parts[:-1])
        or name == "conftest.py"
        or name.startswith("test_")
        or name.endswith("_test.py")
    )
