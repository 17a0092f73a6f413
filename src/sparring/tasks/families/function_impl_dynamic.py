"""Generated (dynamic) tests of the built-in ``function-impl`` tasks.

Per built-in function: argument strategies (the language of :mod:`sparring.judge.dynamic.inputs`) inside
its documented domain, written to ``hidden/dynamic.json``; and the two admission hacks
(``hidden/.admission/hacks/``) that only these generated tests can catch: a lookup table of the
fixed hidden asserts, and the reference that goes wrong after as many calls as those asserts make.
"""

from __future__ import annotations

from typing import Any

from sparring.errors import TaskError
from sparring.tasks.importers import FunctionRecord, dynamic_hidden_files

__all__ = ["DYNAMIC", "dynamic_files", "dynamic_spec"]


def _ilist(lo: int = -20, hi: int = 20, mn: int = 0, mx: int = 8, **kw: Any) -> dict[str, Any]:
    return {"list": {"of": {"int": [lo, hi]}, "min": mn, "max": mx, **kw}}


def _s(alphabet: str, mx: int, mn: int = 0) -> dict[str, Any]:
    return {"str": {"alphabet": alphabet, "min": mn, "max": mx}}


DYNAMIC_CASES = 40
DYNAMIC_REPEAT = 2
DYNAMIC: dict[str, dict[str, Any]] = {
    # Argument strategies (sparring.judge.dynamic.inputs) per built-in, inside each function's documented domain.
    "clamp": {"args": [{"int": [-30, 30]}, {"int": [-10, 10]}, {"int": [-10, 25]}], "where": [["<=", 1, 2]]},
    "count_vowels": {"args": [_s("aeiouxyzAEB ", 12)]},
    "is_palindrome": {"args": [{"one_of": [_s("ab, A", 8), _s("aA1", 5)]}]},
    "running_sum": {"args": [_ilist()]},
    "fizzbuzz": {"args": [{"int": [0, 40]}]},
    "reverse_words": {"args": [_s("abcde   ", 16)]},
    "digit_sum": {"args": [{"int": [-100000, 100000]}]},
    "gcd": {"args": [{"int": [-200, 200]}, {"int": [-200, 200]}]},
    "is_prime": {"args": [{"int": [-5, 500]}]},
    "flatten": {"args": [{"list": {"of": _ilist(mx=3), "max": 4}}]},
    "dedupe": {"args": [_ilist(0, 5, mx=10)]},
    "max_gap": {"args": [_ilist(mx=7)]},
    "rotate_right": {"args": [_ilist(mx=6), {"int": [0, 12]}]},
    "chunk": {"args": [_ilist(mx=9), {"int": [1, 4]}]},
    "caesar": {"args": [_s("abxyzA !", 10), {"int": [-30, 30]}]},
    "run_length": {"args": [_s("aab", 12)]},
    "second_largest": {"args": [_ilist(0, 6, mx=6)]},
    "word_counts": {"args": [_s("abAB  ", 14)]},
    "to_binary": {"args": [{"int": [0, 5000]}]},
    "collatz_steps": {"args": [{"int": [1, 300]}]},
    "differences": {"args": [_ilist(mx=7)]},
    "capitalize_words": {"args": [_s("abAB ", 12)]},
    "merge_sorted": {"args": [_ilist(mx=5, sorted=True), _ilist(mx=5, sorted=True)]},
    "mode": {"args": [_ilist(0, 4, mn=1, mx=9)]},
    "transpose": {"args": [{"matrix": {"of": {"int": [-20, 20]}, "rows": [1, 4], "cols": [1, 4]}}]},
    "balanced": {"args": [_s("()[]{}ab", 10)]},
    "fibonacci": {"args": [{"int": [0, 90]}]},
    "interleave": {"args": [_ilist(mx=5), _ilist(mx=5)]},
    "product_except_self": {"args": [_ilist(-4, 6, mx=6)]},
    "longest_run": {"args": [_ilist(0, 2, mx=10)]},
    "camel_to_snake": {"args": [_s("abcxyzABX", 10, 1)]},
    "count_inversions": {"args": [_ilist(0, 9, mx=9)]},
    "triangle_kind": {"args": [{"int": [1, 12]}, {"int": [1, 12]}, {"int": [1, 12]}]},
    "sum_multiples": {"args": [{"int": [0, 400]}]},
}


def dynamic_spec(entry_point: str) -> dict[str, Any]:
    """The ``hidden/dynamic.json`` of a built-in: fresh inputs every evaluation, compared with the reference."""
    if entry_point not in DYNAMIC:
        raise TaskError(f"function-impl: built-in {entry_point} has no dynamic-test strategy")
    return {"module": "solution", "function": entry_point, "cases": DYNAMIC_CASES, "repeat": DYNAMIC_REPEAT,
            **DYNAMIC[entry_point]}  # fmt: skip


def dynamic_files(rec: FunctionRecord) -> dict[str, str | bytes]:
    """A built-in task's extra hidden files: ``dynamic.json`` and the admission hacks it defeats."""
    return dynamic_hidden_files(rec, dynamic_spec(rec.entry_point))
