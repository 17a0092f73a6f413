"""The building blocks of composed ``function-impl`` tasks: sources, stages and finals.

A composed function is ``final(stage_k(... stage_1(source(arg))))`` over one working value ``v``
(a list of ints or a string). Each block carries the exact sentence its docstring step states and
the one statement of reference code that does it, so the prompt, the reference and the behaviour
are written from the same record and cannot drift apart. Every block is total on its documented
domain (empty lists and strings included), so the reference never raises on a valid input.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["list", "str"]
"""The type of the working value ``v``: ``list`` is list[int], ``str`` is str."""


@dataclass(frozen=True)
class Source:
    """Turns the function's one argument into the working value."""

    key: str
    param: str
    """The parameter as written in the signature, e.g. ``xs: list[int]``."""
    kind: Kind
    doc: str
    code: str
    strategy: dict[str, Any]
    """Argument strategy of the generated tests (:mod:`sparring.judge.dynamic.inputs`), inside the domain."""
    gen: Callable[[random.Random], Any]
    """One random argument for the fixed hidden asserts, from the same domain as ``strategy``."""
    edges: tuple[Any, ...]
    """Edge-case arguments every task of this source asserts on (empty, single, boundary values)."""
    trivial: bool = False
    """Whether the source only copies its argument (it then does not count as a step of the tier)."""

    @property
    def arg_name(self) -> str:
        return self.param.split(":")[0]

    @property
    def arg_type(self) -> str:
        return self.param.split(":")[1].strip()


@dataclass(frozen=True)
class Stage:
    """Maps the working value to a new one of the same kind."""

    key: str
    kind: Kind
    doc: str
    code: str


@dataclass(frozen=True)
class Final:
    """Computes the return value from the working value."""

    key: str
    kind: Kind
    returns: str
    doc: str
    code: str


# --------------------------------------------------------------------------- sources


def _ilist(rng: random.Random) -> list[int]:
    lo, hi = rng.choice([(-20, 20), (-3, 3), (0, 9)])
    return [rng.randint(lo, hi) for _ in range(rng.randint(0, 10))]


def _text(rng: random.Random) -> str:
    alphabet = rng.choice(["abcxyz AB1", "aab  ", "Hello world 42"])
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))


_LIST_STRATEGY = {"one_of": [{"list": {"of": {"int": [lo, hi]}, "min": 0, "max": 10}}
                             for lo, hi in ((-20, 20), (-3, 3), (0, 9))]}  # fmt: skip
_TEXT_STRATEGY = {"one_of": [{"str": {"alphabet": a, "min": 0, "max": 14}}
                             for a in ("abcxyz AB1", "aab  ", "Hello world 42")]}  # fmt: skip
_TEXT_EDGES = ("", "a", "Z", "  ", "aa bb  a", "Hello World 42", "xyz abc")

SOURCES: tuple[Source, ...] = (
    Source("list", "xs: list[int]", "list", "Start with a copy of the list xs.", "v = list(xs)",
           _LIST_STRATEGY, _ilist, ([], [0], [7], [-4, -4], [3, -1, 4, -1, 5, -9, 2, 6], list(range(-5, 6))),
           trivial=True),
    Source("digits", "n: int", "list",
           "Start with the decimal digits of abs(n), most significant first (n == 0 gives [0]).",
           "v = [int(c) for c in str(abs(n))]",
           {"one_of": [{"int": [-1000000, 1000000]}, {"int": [-30, 30]}]},
           lambda r: r.choice([r.randint(-1000000, 1000000), r.randint(-30, 30)]),
           (0, 7, -45, 1000, 987654321, -120034)),
    Source("range", "n: int", "list", "Start with the list [1, 2, ..., n] (n >= 0; n == 0 gives []).",
           "v = list(range(1, n + 1))", {"int": [0, 30]}, lambda r: r.randint(0, 30), (0, 1, 2, 9, 30)),
    Source("divisors", "n: int", "list", "Start with the divisors of n (n >= 1) in increasing order.",
           "v = [d for d in range(1, n + 1) if n % d == 0]", {"int": [1, 300]}, lambda r: r.randint(1, 300),
           (1, 2, 12, 97, 210, 300)),
    Source("wordlens", "s: str", "list",
           "Start with the lengths of the whitespace-separated words of s, in order.",
           "v = [len(w) for w in s.split()]", _TEXT_STRATEGY, _text, _TEXT_EDGES),
    Source("letters", "s: str", "list",
           "Start with the alphabet positions (a = 1, ..., z = 26) of the lowercase ASCII letters of s, in "
           "order; every other character is skipped.",
           "v = [ord(c) - 96 for c in s if 'a' <= c <= 'z']", _TEXT_STRATEGY, _text, _TEXT_EDGES),
    Source("text", "s: str", "str", "Start with the string s.", "v = s", _TEXT_STRATEGY, _text, _TEXT_EDGES,
           trivial=True),
)  # fmt: skip

# --------------------------------------------------------------------------- list stages


def _list_stages() -> list[Stage]:
    out: list[Stage] = []

    def add(key: str, doc: str, code: str) -> None:
        out.append(Stage(key, "list", doc, code))

    for k, r in [(2, 0), (2, 1), (3, 0), (3, 1), (3, 2), (4, 1), (5, 0)]:
        add(
            f"keep_mod_{k}_{r}",
            f"Keep only the elements x with x % {k} == {r} (Python's %, so x % {k} is "
            f"in 0..{k - 1} even for negative x), in order.",
            f"v = [x for x in v if x % {k} == {r}]",
        )
    for t in (-3, 0, 4):
        add(
            f"keep_gt_{t}",
            f"Keep only the elements greater than {t}, in order.",
            f"v = [x for x in v if x > {t}]",
        )
    for t in (0, 5):
        add(
            f"keep_lt_{t}",
            f"Keep only the elements less than {t}, in order.",
            f"v = [x for x in v if x < {t}]",
        )
    for a, b in [(2, 0), (3, 1), (-1, 0), (-2, 3), (1, 5), (1, -4), (4, -1)]:
        expr = {1: "x", -1: "-x"}.get(a, f"{a} * x") + (f" + {b}" if b > 0 else f" - {-b}" if b < 0 else "")
        add(f"affine_{a}_{b}", f"Replace each element x by {expr}.", f"v = [{expr} for x in v]")
    add("abs", "Replace each element by its absolute value.", "v = [abs(x) for x in v]")
    add("square", "Replace each element x by x * x.", "v = [x * x for x in v]")
    for lo, hi in [(-5, 5), (0, 10)]:
        add(
            f"clamp_{lo}_{hi}",
            f"Limit each element to the range [{lo}, {hi}] (values below {lo} become {lo}, "
            f"values above {hi} become {hi}).",
            f"v = [min(max(x, {lo}), {hi}) for x in v]",
        )
    for k in (2, 3):
        add(
            f"floordiv_{k}",
            f"Replace each element x by x // {k} (floor division: it rounds down, so -1 // {k} is -1).",
            f"v = [x // {k} for x in v]",
        )
    for k in (3, 5, 7):
        add(
            f"mod_{k}",
            f"Replace each element x by x % {k} (Python's %, in 0..{k - 1} even for negative x).",
            f"v = [x % {k} for x in v]",
        )
    add("sort", "Sort the list in ascending order.", "v = sorted(v)")
    add("sort_desc", "Sort the list in descending order.", "v = sorted(v, reverse=True)")
    add("reverse", "Reverse the order of the list.", "v = v[::-1]")
    for k in (2, 3, 5):
        add(
            f"take_{k}", f"Keep only the first {k} elements (all of them if there are fewer).", f"v = v[:{k}]"
        )
    for k in (1, 2):
        add(
            f"drop_{k}",
            f"Remove the first {k} element{'s' if k > 1 else ''} (all of them if there are fewer).",
            f"v = v[{k}:]",
        )
    for k in (2, 3):
        add(
            f"take_last_{k}",
            f"Keep only the last {k} elements (all of them if there are fewer).",
            f"v = v[-{k}:]",
        )
    for k in (2, 3):
        add(
            f"every_{k}",
            f"Keep only the elements at positions 0, {k}, {2 * k}, ... (counting from 0).",
            f"v = v[::{k}]",
        )
    add(
        "odd_positions",
        "Keep only the elements at odd positions 1, 3, 5, ... (counting from 0).",
        "v = v[1::2]",
    )
    add(
        "dedupe",
        "Remove repeated values, keeping the first occurrence of each, in order.",
        "v = [x for i, x in enumerate(v) if x not in v[:i]]",
    )
    add(
        "prefix_sums",
        "Replace the list by its running sums: element i becomes the sum of elements 0..i.",
        "v = [sum(v[:i + 1]) for i in range(len(v))]",
    )
    add(
        "running_max",
        "Replace the list by its running maximum: element i becomes the largest of elements 0..i.",
        "v = [max(v[:i + 1]) for i in range(len(v))]",
    )
    add(
        "differences",
        "Replace the list by the differences of neighbours: v[i + 1] - v[i] for each i "
        "(one element fewer; a list of length 0 or 1 becomes []).",
        "v = [b - a for a, b in zip(v, v[1:])]",
    )
    add(
        "pair_sums",
        "Replace the list by the sums of neighbours: v[i] + v[i + 1] for each i (one element fewer; "
        "a list of length 0 or 1 becomes []).",
        "v = [a + b for a, b in zip(v, v[1:])]",
    )
    for k in (1, 2):
        add(
            f"rotate_{k}",
            f"Rotate the list left by {k} place{'s' if k > 1 else ''}: the first {k} element"
            f"{'s move' if k > 1 else ' moves'} to the end, with {k} taken modulo the length (an empty list "
            "stays empty).",
            f"v = v[{k} % len(v):] + v[:{k} % len(v)] if v else v",
        )
    add(
        "drop_max",
        "Remove every occurrence of the largest value (an empty list stays empty).",
        "v = [x for x in v if x != max(v)]",
    )
    add(
        "drop_min",
        "Remove every occurrence of the smallest value (an empty list stays empty).",
        "v = [x for x in v if x != min(v)]",
    )
    return out


LIST_STAGES: tuple[Stage, ...] = tuple(_list_stages())

LIST_FINALS: tuple[Final, ...] = (
    Final("sum", "list", "int", "Return the sum of the elements (0 if there are none).", "return sum(v)"),
    Final("count", "list", "int", "Return the number of elements.", "return len(v)"),
    Final(
        "max",
        "list",
        "int",
        "Return the largest element, or 0 if there are none.",
        "return max(v, default=0)",
    ),
    Final(
        "min",
        "list",
        "int",
        "Return the smallest element, or 0 if there are none.",
        "return min(v, default=0)",
    ),
    Final(
        "first",
        "list",
        "int",
        "Return the first element, or -1 if there are none.",
        "return v[0] if v else -1",
    ),
    Final(
        "last",
        "list",
        "int",
        "Return the last element, or -1 if there are none.",
        "return v[-1] if v else -1",
    ),
    Final(
        "spread",
        "list",
        "int",
        "Return the largest element minus the smallest, or 0 if there are none.",
        "return max(v) - min(v) if v else 0",
    ),
    Final(
        "altsum",
        "list",
        "int",
        "Return the alternating sum v[0] - v[1] + v[2] - v[3] + ... (0 if there are none).",
        "return sum(x if i % 2 == 0 else -x for i, x in enumerate(v))",
    ),
    Final(
        "weighted",
        "list",
        "int",
        "Return the sum of (i + 1) * v[i] over the positions i counted from 0 (0 if there are none).",
        "return sum((i + 1) * x for i, x in enumerate(v))",
    ),
    Final("distinct", "list", "int", "Return the number of distinct values.", "return len(set(v))"),
    Final(
        "positives",
        "list",
        "int",
        "Return how many elements are greater than 0.",
        "return sum(1 for x in v if x > 0)",
    ),
    Final(
        "mean",
        "list",
        "int",
        "Return the sum of the elements floor-divided (//) by their number, or 0 if there are none.",
        "return sum(v) // len(v) if v else 0",
    ),
    Final(
        "argmax",
        "list",
        "int",
        "Return the position (counting from 0) of the first occurrence of the largest "
        "element, or -1 if there are none.",
        "return v.index(max(v)) if v else -1",
    ),
    Final(
        "product",
        "list",
        "int",
        "Return the product of the elements modulo 1000 (Python's %, so the result "
        "is in 0..999; the product of no elements is 1).",
        "p = 1\nfor x in v:\n    p = p * x % 1000\nreturn p",
    ),
    Final("list", "list", "list[int]", "Return the resulting list.", "return v"),
    Final(
        "joined",
        "list",
        "str",
        "Return the elements written in decimal and joined by '-' ('' if there are none).",
        "return '-'.join(str(x) for x in v)",
    ),
)

# --------------------------------------------------------------------------- string stages


def _str_stages() -> list[Stage]:
    out: list[Stage] = []

    def add(key: str, doc: str, code: str) -> None:
        out.append(Stage(key, "str", doc, code))

    add("lower", "Convert every letter to lowercase.", "v = v.lower()")
    add("upper", "Convert every letter to uppercase.", "v = v.upper()")
    add("swapcase", "Swap the case of every letter (lowercase to uppercase and back).", "v = v.swapcase()")
    add("reverse", "Reverse the string.", "v = v[::-1]")
    for k in (1, 3, 13):
        add(
            f"caesar_{k}",
            f"Shift every lowercase ASCII letter {k} place{'s' if k > 1 else ''} forward in the "
            "alphabet, wrapping from z back to a; every other character stays as it is.",
            f"v = ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c for c in v)",
        )
    for name, chars in [("vowels", "aeiouAEIOU"), ("spaces", " "), ("digits", "0123456789")]:
        add(
            f"remove_{name}",
            f"Remove every character that is one of {chars!r}.",
            f"v = ''.join(c for c in v if c not in {chars!r})",
        )
    add(
        "letters_only",
        "Keep only the ASCII letters a-z and A-Z, in order.",
        "v = ''.join(c for c in v if 'a' <= c.lower() <= 'z')",
    )
    for a, b in [(" ", "_"), ("a", "o"), ("b", "")]:
        doc = f"Replace every {a!r} by {b!r}." if b else f"Remove every {a!r}."
        add(f"replace_{ord(a)}_{b and ord(b)}", doc, f"v = v.replace({a!r}, {b!r})")
    add("double", "Write every character twice ('ab' becomes 'aabb').", "v = ''.join(c + c for c in v)")
    add(
        "squeeze",
        "Replace every run of one repeated character by a single copy of it ('aabccc' becomes 'abc').",
        "v = ''.join(c for i, c in enumerate(v) if i == 0 or v[i - 1] != c)",
    )
    add(
        "sort",
        "Sort the characters by their Unicode code point (so ' ' < '1' < 'A' < 'a').",
        "v = ''.join(sorted(v))",
    )
    for k in (1, 2):
        add(
            f"rotate_{k}",
            f"Rotate the string left by {k} character{'s' if k > 1 else ''}: the first {k} move"
            f"{'' if k > 1 else 's'} to the end, with {k} taken modulo the length (an empty string stays empty).",
            f"v = v[{k} % len(v):] + v[:{k} % len(v)] if v else v",
        )
    for k in (3, 5):
        add(
            f"take_{k}",
            f"Keep only the first {k} characters (all of them if there are fewer).",
            f"v = v[:{k}]",
        )
    add("drop_2", "Remove the first 2 characters (all of them if there are fewer).", "v = v[2:]")
    add(
        "dedupe",
        "Remove repeated characters, keeping the first occurrence of each, in order.",
        "v = ''.join(c for i, c in enumerate(v) if c not in v[:i])",
    )
    add("every_2", "Keep only the characters at positions 0, 2, 4, ... (counting from 0).", "v = v[::2]")
    add(
        "title",
        "Split on single spaces and, in each piece, uppercase the first character and lowercase the "
        "rest; join the pieces back with single spaces (so runs of spaces are kept).",
        "v = ' '.join(w[:1].upper() + w[1:].lower() for w in v.split(' '))",
    )
    add(
        "reverse_words",
        "Reverse the order of the whitespace-separated words and join them with single "
        "spaces (leading, trailing and repeated whitespace disappears).",
        "v = ' '.join(reversed(v.split()))",
    )
    return out


STR_STAGES: tuple[Stage, ...] = tuple(_str_stages())

STR_FINALS: tuple[Final, ...] = (
    Final("text", "str", "str", "Return the resulting string.", "return v"),
    Final("length", "str", "int", "Return its length.", "return len(v)"),
    Final("count_a", "str", "int", "Return how many times 'a' occurs in it.", "return v.count('a')"),
    Final(
        "uppers",
        "str",
        "int",
        "Return how many of its characters are ASCII uppercase letters A-Z.",
        "return sum(1 for c in v if 'A' <= c <= 'Z')",
    ),
    Final("distinct", "str", "int", "Return the number of distinct characters in it.", "return len(set(v))"),
    Final(
        "words", "str", "int", "Return the number of its whitespace-separated words.", "return len(v.split())"
    ),
    Final(
        "find_a",
        "str",
        "int",
        "Return the position (counting from 0) of the first 'a' in it, or -1 if there is none.",
        "return v.find('a')",
    ),
    Final(
        "codesum",
        "str",
        "int",
        "Return the sum of the Unicode code points (ord) of its characters modulo 1000.",
        "return sum(ord(c) for c in v) % 1000",
    ),
)

STAGES: dict[Kind, tuple[Stage, ...]] = {"list": LIST_STAGES, "str": STR_STAGES}
FINALS: dict[Kind, tuple[Final, ...]] = {"list": LIST_FINALS, "str": STR_FINALS}

__all__ = ["FINALS", "SOURCES", "STAGES", "Final", "Kind", "Source", "Stage"]
