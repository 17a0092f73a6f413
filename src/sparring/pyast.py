"""Parse Python source safely from several threads: :func:`parse`, the one ``ast.parse`` of Sparring.

CPython 3.11 keeps the counter that guards its AST construction against deep recursion in
interpreter-wide state. When the garbage collector runs Python code (a finalizer) in the middle of a
parse, another thread can run and parse too; the counter is then off and the first parse raises
``SystemError: AST constructor recursion depth mismatch`` although its tree was fine (cpython
gh-106905; in a clean clone's suite under load the judge's static checks hit it, scoring a
red-team case as an error). Every parse here takes one process-wide lock, and the spurious error
from a parse outside it (another library's) is retried. The lock is the one piece of global state
this needs: the state it guards is the interpreter's.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()  # the interpreter's AST state is process-wide, so is its guard
_MISMATCH = "recursion depth mismatch"
_TRIES = 5


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """``ast.parse(source, filename, mode)``, serialised with every other call of this function."""
    for attempt in range(_TRIES):
        with _LOCK:
            try:
                return ast.parse(source, filename=filename, mode=mode)
            except SystemError as e:
                if _MISMATCH not in str(e) or attempt == _TRIES - 1:
                    raise
    raise AssertionError("unreachable")  # pragma: no cover
