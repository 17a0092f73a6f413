"""sparring.pyast.parse holds when threads parse while the garbage collector runs Python code.

CPython 3.11 keeps its AST-construction recursion counter in interpreter-wide state; a finalizer run
by the collector mid-parse lets another thread parse, and the first parse then raises
``SystemError: AST constructor recursion depth mismatch`` (cpython gh-106905). A clean clone's suite
under load hit it in the judge's static checks. Here 4 threads parse while making cyclic garbage
with finalizers: the bare ``ast.parse`` fails (positive control, on the interpreters with the bug),
``pyast.parse`` never does and returns the same tree.
"""

from __future__ import annotations

import ast
import gc
import sys
import threading
from collections.abc import Callable

from sparring import pyast
from tests_support import HANG_S

SOURCE = "def f(x):\n" + "".join(
    f"    if x > {i}:\n        y = [a for a in range({i}) if a % 2]\n" for i in range(150)
)


class _Finalized:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it, running __del__ (Python code) mid-parse

    def __del__(self) -> None:
        s = 0
        for i in range(50):
            s += i


def _hammer(parse: Callable[[str], ast.AST], threads: int = 4, rounds: int = 60) -> tuple[list[str], int]:
    errors: list[str] = []
    trees = 0
    lock = threading.Lock()
    want = ast.dump(ast.parse(SOURCE))

    def work() -> None:
        nonlocal trees
        for _ in range(rounds):
            for _ in range(20):
                _Finalized()
            try:
                tree = parse(SOURCE)
            except SystemError as e:
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                trees += ast.dump(tree) == want

    old_interval, old_threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 5, 5)
    try:
        ts = [threading.Thread(target=work) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=HANG_S * 3)  # minutes on a loaded host: the switch interval makes it slow
    finally:
        sys.setswitchinterval(old_interval)
        gc.set_threshold(*old_threshold)
    assert not any(t.is_alive() for t in ts), "the parsing threads hung"
    return errors, trees


def test_parse_holds_under_threads_and_finalizers():
    if sys.version_info < (3, 12):  # the bug's interpreters: the bare parse must show it
        errors = []
        for _ in range(10):  # tries: the race needs a collection at the wrong moment (~1 run in 6 misses it)
            errors, _ = _hammer(ast.parse)
            if errors:
                break
        assert errors and "recursion depth mismatch" in errors[0], (
            "positive control: bare ast.parse should fail"
        )
    errors, trees = _hammer(pyast.parse)
    assert errors == [] and trees == 4 * 60


def test_parse_keeps_ast_parse_behaviour():
    assert ast.dump(pyast.parse("x = 1")) == ast.dump(ast.parse("x = 1"))
    assert isinstance(pyast.parse("1 + 2", mode="eval"), ast.Expression)
    assert pyast.parse(
        b"\xef\xbb\xbfx = 1\n"
    ).body  # bytes with a byte-order mark, as the interpreter reads it
    try:
        pyast.parse("def (", filename="bad.py")
    except SyntaxError as e:
        assert e.filename == "bad.py"
    else:
        raise AssertionError("a syntax error must still raise SyntaxError")
