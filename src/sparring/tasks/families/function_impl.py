"""The ``function-impl`` family: implement one small function from its signature and docstring.

The built-in functions are records in the importer's function-jsonl format
(prompt / canonical_solution / test / entry_point) and are written through
:func:`sparring.tasks.importers.write_function_tasks`, the same path as
``sparring tasks import``. A seed chooses which functions (and in which order)
and adds extra hidden asserts: random inputs from the seed, expected outputs
computed from the canonical solution at generation time.

Every task also gets generated tests (``hidden/dynamic.json``, see
:mod:`sparring.judge.dynamic.inputs`): argument strategies inside the function's
documented domain, from which the judge draws fresh inputs at every evaluation
and compares the candidate with the reference solution, so memorising the fixed
hidden asserts or keeping call-count state fails. Two admission hacks
(``hidden/.admission/hacks/``: a lookup table of the hidden asserts, and the
reference that goes wrong after as many calls as the hidden tests make) must
score zero at admission, which only the generated tests can ensure.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError, TaskError
from sparring.tasks.families.code_repair import check_n
from sparring.tasks.families.function_impl_compose import (
    Composed,
    composed_functions,
    fingerprints_of,
    parameter_type,
)
from sparring.tasks.families.function_impl_dynamic import dynamic_files
from sparring.tasks.importers import (
    FAMILY,
    FunctionRecord,
    RecordMeta,
    dynamic_hidden_files,
    validate_record,
    write_function_tasks,
)
from sparring.tasks.loader import Task
from sparring.tasks.spec import Provenance

VERSION = "2"
GENERATOR = f"{FAMILY}/{VERSION}"
_SALT = f"{FAMILY}/1"
"""Seeds the random choices; unchanged since version 1, so a seed picks the same functions and asserts."""
EXTRA_CASES = 6
MAX_N = 1000
"""Tasks per seed: the built-ins, then composed functions (a seed yields well over this many distinct ones)."""

Gen = Callable[[random.Random], tuple[Any, ...]]


@dataclass(frozen=True)
class BuiltinFunction:
    """A built-in function: its record fields and a generator of random argument tuples."""

    name: str
    signature: str
    doc: str
    body: str
    asserts: tuple[str, ...]
    gen: Gen

    def prompt(self) -> str:
        doc = self.doc.strip().replace("\n", "\n    ")
        return f'def {self.name}({self.signature}:\n    """{doc}\n    """\n'

    def record(self, extra: Sequence[str] = ()) -> dict[str, str]:
        lines = [*self.asserts, *extra]
        test = "def check(candidate):\n" + "".join(f"    {a}\n" for a in lines)
        return {
            "task_id": self.name,
            "prompt": self.prompt(),
            "canonical_solution": self.body,
            "test": test,
            "entry_point": self.name,
        }


def _ints(rng: random.Random, n: int, lo: int = -20, hi: int = 20) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _word(rng: random.Random, letters: str = "abcde", lo: int = 1, hi: int = 6) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(lo, hi)))


def _clamp_args(rng: random.Random) -> tuple[Any, ...]:
    lo = rng.randint(-10, 10)
    return (rng.randint(-30, 30), lo, lo + rng.randint(0, 15))


def _triangle_args(rng: random.Random) -> tuple[Any, ...]:
    a = rng.randint(1, 6)
    return (a, rng.choice([a, rng.randint(1, 12)]), rng.choice([a, rng.randint(1, 12)]))


def _camel(rng: random.Random) -> tuple[Any, ...]:
    parts = [_word(rng, "abcxyz", 1, 4) for _ in range(rng.randint(1, 4))]
    return (parts[0] + "".join(p.capitalize() for p in parts[1:]),)


def _brackets(rng: random.Random) -> tuple[Any, ...]:
    return ("".join(rng.choice("()[]{}ab") for _ in range(rng.randint(0, 10))),)


BUILTINS: tuple[BuiltinFunction, ...] = (
    BuiltinFunction(
        "clamp",
        "x: int, lo: int, hi: int) -> int",
        "Return x limited to the closed range [lo, hi] (lo <= hi).",
        "    return max(lo, min(x, hi))\n",
        (
            "assert candidate(5, 0, 10) == 5",
            "assert candidate(-3, 0, 10) == 0",
            "assert candidate(15, 0, 10) == 10",
        ),
        _clamp_args,
    ),
    BuiltinFunction(
        "count_vowels",
        "s: str) -> int",
        "Count the vowels (a, e, i, o, u, either case) in s.",
        "    return sum(1 for c in s.lower() if c in 'aeiou')\n",
        (
            "assert candidate('') == 0",
            "assert candidate('Hello World') == 3",
            "assert candidate('AEIOUxyz') == 5",
        ),
        lambda r: (_word(r, "aeiouxyzAEB ", 0, 12),),
    ),
    BuiltinFunction(
        "is_palindrome",
        "s: str) -> bool",
        "Whether s reads the same backwards, ignoring case and every character that is not a letter or digit.",
        "    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
        (
            "assert candidate('A man, a plan, a canal: Panama') is True",
            "assert candidate('abc') is False",
            "assert candidate('') is True",
        ),
        lambda r: (r.choice([_word(r, "ab, A", 0, 8), (lambda w: w + w[::-1])(_word(r, "abB1 ", 0, 4))]),),
    ),
    BuiltinFunction(
        "running_sum",
        "xs: list[int]) -> list[int]",
        "Return the running (prefix) sums of xs: element i is sum(xs[:i + 1]).",
        "    out, total = [], 0\n    for x in xs:\n        total += x\n        out.append(total)\n    return out\n",
        (
            "assert candidate([]) == []",
            "assert candidate([1, 2, 3]) == [1, 3, 6]",
            "assert candidate([5, -5, 2]) == [5, 0, 2]",
        ),
        lambda r: (_ints(r, r.randint(0, 8)),),
    ),
    BuiltinFunction(
        "fizzbuzz",
        "n: int) -> list[str]",
        "Return the strings for 1..n: 'FizzBuzz' for multiples of 15, 'Fizz' for multiples of 3,\n"
        "'Buzz' for multiples of 5 and the number itself (as a string) otherwise.",
        "    out = []\n    for i in range(1, n + 1):\n"
        "        out.append('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else str(i))\n"
        "    return out\n",
        (
            "assert candidate(0) == []",
            "assert candidate(5) == ['1', '2', 'Fizz', '4', 'Buzz']",
            "assert candidate(15)[-1] == 'FizzBuzz'",
        ),
        lambda r: (r.randint(0, 40),),
    ),
    BuiltinFunction(
        "reverse_words",
        "s: str) -> str",
        "Return the words of s (separated by runs of whitespace) in reverse order, joined by single spaces.",
        "    return ' '.join(reversed(s.split()))\n",
        (
            "assert candidate('hello world') == 'world hello'",
            "assert candidate('  a   b c ') == 'c b a'",
            "assert candidate('') == ''",
        ),
        lambda r: ("  ".join(_word(r) for _ in range(r.randint(0, 5))),),
    ),
    BuiltinFunction(
        "digit_sum",
        "n: int) -> int",
        "Return the sum of the decimal digits of n (the sign of a negative n is ignored).",
        "    return sum(int(c) for c in str(abs(n)))\n",
        ("assert candidate(0) == 0", "assert candidate(1234) == 10", "assert candidate(-99) == 18"),
        lambda r: (r.randint(-100000, 100000),),
    ),
    BuiltinFunction(
        "gcd",
        "a: int, b: int) -> int",
        "Return the greatest common divisor of a and b, always non-negative; gcd(0, 0) is 0.",
        "    a, b = abs(a), abs(b)\n    while b:\n        a, b = b, a % b\n    return a\n",
        (
            "assert candidate(12, 18) == 6",
            "assert candidate(0, 5) == 5",
            "assert candidate(-4, 6) == 2",
            "assert candidate(0, 0) == 0",
        ),
        lambda r: (r.randint(-200, 200), r.randint(-200, 200)),
    ),
    BuiltinFunction(
        "is_prime",
        "n: int) -> bool",
        "Whether n is a prime number (numbers below 2 are not prime).",
        "    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n        if n % i == 0:\n"
        "            return False\n        i += 1\n    return True\n",
        (
            "assert candidate(2) is True",
            "assert candidate(1) is False",
            "assert candidate(91) is False",
            "assert candidate(97) is True",
        ),
        lambda r: (r.randint(-5, 500),),
    ),
    BuiltinFunction(
        "flatten",
        "xs: list[list[int]]) -> list[int]",
        "Concatenate the lists in xs, in order, into one list.",
        "    return [x for sub in xs for x in sub]\n",
        ("assert candidate([]) == []", "assert candidate([[1, 2], [], [3]]) == [1, 2, 3]"),
        lambda r: ([_ints(r, r.randint(0, 3)) for _ in range(r.randint(0, 4))],),
    ),
    BuiltinFunction(
        "dedupe",
        "xs: list[int]) -> list[int]",
        "Return xs without repeated elements, keeping the first occurrence of each, in order.",
        "    seen = set()\n    out = []\n    for x in xs:\n        if x not in seen:\n            seen.add(x)\n"
        "            out.append(x)\n    return out\n",
        ("assert candidate([3, 1, 3, 2, 1]) == [3, 1, 2]", "assert candidate([]) == []"),
        lambda r: (_ints(r, r.randint(0, 10), 0, 5),),
    ),
    BuiltinFunction(
        "max_gap",
        "xs: list[int]) -> int",
        "Return the largest difference between two neighbours of sorted(xs); 0 if xs has fewer than 2 elements.",
        "    s = sorted(xs)\n    return max((b - a for a, b in zip(s, s[1:])), default=0)\n",
        ("assert candidate([]) == 0", "assert candidate([7]) == 0", "assert candidate([1, 10, 3]) == 7"),
        lambda r: (_ints(r, r.randint(0, 7)),),
    ),
    BuiltinFunction(
        "rotate_right",
        "xs: list[int], k: int) -> list[int]",
        "Return xs rotated right by k places (k >= 0 may exceed len(xs)); an empty list stays empty.",
        "    if not xs:\n        return []\n    k %= len(xs)\n    return xs[-k:] + xs[:-k] if k else list(xs)\n",
        (
            "assert candidate([1, 2, 3, 4], 1) == [4, 1, 2, 3]",
            "assert candidate([1, 2, 3], 5) == [2, 3, 1]",
            "assert candidate([], 3) == []",
        ),
        lambda r: (_ints(r, r.randint(0, 6)), r.randint(0, 12)),
    ),
    BuiltinFunction(
        "chunk",
        "xs: list[int], size: int) -> list[list[int]]",
        "Split xs into consecutive pieces of length size (size >= 1); the last piece may be shorter.",
        "    return [xs[i:i + size] for i in range(0, len(xs), size)]\n",
        ("assert candidate([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]", "assert candidate([], 3) == []"),
        lambda r: (_ints(r, r.randint(0, 9)), r.randint(1, 4)),
    ),
    BuiltinFunction(
        "caesar",
        "s: str, shift: int) -> str",
        "Shift every lowercase ASCII letter of s by shift places in the alphabet (wrapping around, shift may be\n"
        "negative); every other character is unchanged.",
        "    out = []\n    for c in s:\n        if 'a' <= c <= 'z':\n"
        "            out.append(chr((ord(c) - 97 + shift) % 26 + 97))\n        else:\n            out.append(c)\n"
        "    return ''.join(out)\n",
        (
            "assert candidate('abc', 1) == 'bcd'",
            "assert candidate('xyz', 3) == 'abc'",
            "assert candidate('Hi, b!', -1) == 'Hh, a!'",
        ),
        lambda r: (_word(r, "abxyzA !", 0, 10), r.randint(-30, 30)),
    ),
    BuiltinFunction(
        "run_length",
        "s: str) -> str",
        "Run-length encode s: each maximal run of one character becomes the character followed by the run's length.",
        "    out = []\n    i = 0\n    while i < len(s):\n        j = i\n        while j < len(s) and s[j] == s[i]:\n"
        "            j += 1\n        out.append(f'{s[i]}{j - i}')\n        i = j\n    return ''.join(out)\n",
        (
            "assert candidate('') == ''",
            "assert candidate('aaab') == 'a3b1'",
            "assert candidate('abba') == 'a1b2a1'",
        ),
        lambda r: (_word(r, "aab", 0, 12),),
    ),
    BuiltinFunction(
        "second_largest",
        "xs: list[int]) -> int | None",
        "Return the second largest distinct value in xs, or None if xs has fewer than two distinct values.",
        "    s = sorted(set(xs))\n    return s[-2] if len(s) >= 2 else None\n",
        (
            "assert candidate([1, 3, 2]) == 2",
            "assert candidate([5, 5, 4]) == 4",
            "assert candidate([7, 7]) is None",
            "assert candidate([]) is None",
        ),
        lambda r: (_ints(r, r.randint(0, 6), 0, 6),),
    ),
    BuiltinFunction(
        "word_counts",
        "s: str) -> dict[str, int]",
        "Count the whitespace-separated words of s, case-insensitively: map each lowercased word to its count.",
        "    out: dict[str, int] = {}\n    for w in s.lower().split():\n        out[w] = out.get(w, 0) + 1\n    return out\n",
        ("assert candidate('') == {}", "assert candidate('a B b') == {'a': 1, 'b': 2}"),
        lambda r: (" ".join(_word(r, "abAB", 1, 2) for _ in range(r.randint(0, 6))),),
    ),
    BuiltinFunction(
        "to_binary",
        "n: int) -> str",
        "Return the binary digits of n >= 0, without prefix or leading zeros ('0' for 0).",
        "    return format(n, 'b')\n",
        ("assert candidate(0) == '0'", "assert candidate(5) == '101'", "assert candidate(16) == '10000'"),
        lambda r: (r.randint(0, 5000),),
    ),
    BuiltinFunction(
        "collatz_steps",
        "n: int) -> int",
        "Return how many steps of the Collatz map (n // 2 if n is even, else 3 * n + 1) take n >= 1 to 1.",
        "    steps = 0\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        steps += 1\n"
        "    return steps\n",
        ("assert candidate(1) == 0", "assert candidate(6) == 8", "assert candidate(27) == 111"),
        lambda r: (r.randint(1, 300),),
    ),
    BuiltinFunction(
        "differences",
        "xs: list[int]) -> list[int]",
        "Return the differences xs[i + 1] - xs[i] of neighbouring elements.",
        "    return [b - a for a, b in zip(xs, xs[1:])]\n",
        (
            "assert candidate([1, 4, 9]) == [3, 5]",
            "assert candidate([2]) == []",
            "assert candidate([]) == []",
        ),
        lambda r: (_ints(r, r.randint(0, 7)),),
    ),
    BuiltinFunction(
        "capitalize_words",
        "s: str) -> str",
        "Return s with the first character of every space-separated word uppercased and the rest lowercased;\n"
        "the spaces are kept exactly as they are.",
        "    return ' '.join(w[:1].upper() + w[1:].lower() for w in s.split(' '))\n",
        (
            "assert candidate('hello wORLD') == 'Hello World'",
            "assert candidate(' a  b') == ' A  B'",
            "assert candidate('') == ''",
        ),
        lambda r: (" ".join(_word(r, "abAB", 0, 4) for _ in range(r.randint(0, 4))),),
    ),
    BuiltinFunction(
        "merge_sorted",
        "a: list[int], b: list[int]) -> list[int]",
        "Merge two ascending lists into one ascending list containing every element of both.",
        "    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n"
        "            out.append(a[i])\n            i += 1\n        else:\n            out.append(b[j])\n            j += 1\n"
        "    return out + a[i:] + b[j:]\n",
        ("assert candidate([1, 4], [2, 3, 5]) == [1, 2, 3, 4, 5]", "assert candidate([], [1]) == [1]"),
        lambda r: (sorted(_ints(r, r.randint(0, 5))), sorted(_ints(r, r.randint(0, 5)))),
    ),
    BuiltinFunction(
        "mode",
        "xs: list[int]) -> int",
        "Return the most frequent value of the non-empty list xs; ties go to the smallest value.",
        "    counts: dict[int, int] = {}\n    for x in xs:\n        counts[x] = counts.get(x, 0) + 1\n"
        "    return min(counts, key=lambda v: (-counts[v], v))\n",
        (
            "assert candidate([1, 2, 2, 3]) == 2",
            "assert candidate([4, 1, 4, 1]) == 1",
            "assert candidate([9]) == 9",
        ),
        lambda r: (_ints(r, r.randint(1, 9), 0, 4),),
    ),
    BuiltinFunction(
        "transpose",
        "m: list[list[int]]) -> list[list[int]]",
        "Return the transpose of the rectangular matrix m (a list of equally long rows); [] for [].",
        "    return [list(col) for col in zip(*m)]\n",
        (
            "assert candidate([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]",
            "assert candidate([]) == []",
        ),
        lambda r: ((lambda c: [_ints(r, c) for _ in range(r.randint(1, 4))])(r.randint(1, 4)),),
    ),
    BuiltinFunction(
        "balanced",
        "s: str) -> bool",
        "Whether the brackets (), [] and {} in s are balanced and properly nested; other characters are ignored.",
        "    pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n    for c in s:\n        if c in '([{':\n"
        "            stack.append(c)\n        elif c in pairs:\n            if not stack or stack.pop() != pairs[c]:\n"
        "                return False\n    return not stack\n",
        (
            "assert candidate('') is True",
            "assert candidate('([]{a})') is True",
            "assert candidate('(]') is False",
            "assert candidate('((') is False",
        ),
        _brackets,
    ),
    BuiltinFunction(
        "fibonacci",
        "n: int) -> int",
        "Return the n-th Fibonacci number for n >= 0, where fibonacci(0) == 0 and fibonacci(1) == 1.",
        "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        ("assert candidate(0) == 0", "assert candidate(1) == 1", "assert candidate(10) == 55"),
        lambda r: (r.randint(0, 90),),
    ),
    BuiltinFunction(
        "interleave",
        "a: list[int], b: list[int]) -> list[int]",
        "Alternate elements of a and b, starting with a; when one list runs out, append the rest of the other.",
        "    out = []\n    for i in range(max(len(a), len(b))):\n        if i < len(a):\n            out.append(a[i])\n"
        "        if i < len(b):\n            out.append(b[i])\n    return out\n",
        ("assert candidate([1, 2, 3], [9]) == [1, 9, 2, 3]", "assert candidate([], [4, 5]) == [4, 5]"),
        lambda r: (_ints(r, r.randint(0, 5)), _ints(r, r.randint(0, 5))),
    ),
    BuiltinFunction(
        "product_except_self",
        "xs: list[int]) -> list[int]",
        "Return a list whose element i is the product of every element of xs except xs[i].",
        "    out = []\n    for i in range(len(xs)):\n        p = 1\n        for j, x in enumerate(xs):\n"
        "            if j != i:\n                p *= x\n        out.append(p)\n    return out\n",
        (
            "assert candidate([1, 2, 3, 4]) == [24, 12, 8, 6]",
            "assert candidate([0, 5]) == [5, 0]",
            "assert candidate([]) == []",
        ),
        lambda r: (_ints(r, r.randint(0, 6), -4, 6),),
    ),
    BuiltinFunction(
        "longest_run",
        "xs: list[int]) -> int",
        "Return the length of the longest run of equal neighbouring elements of xs (0 for []).",
        "    best = cur = 0\n    for i, x in enumerate(xs):\n        cur = cur + 1 if i and xs[i - 1] == x else 1\n"
        "        best = max(best, cur)\n    return best\n",
        (
            "assert candidate([]) == 0",
            "assert candidate([1, 1, 2, 2, 2, 1]) == 3",
            "assert candidate([5]) == 1",
        ),
        lambda r: (_ints(r, r.randint(0, 10), 0, 2),),
    ),
    BuiltinFunction(
        "camel_to_snake",
        "s: str) -> str",
        "Convert a camelCase identifier to snake_case: put '_' before every uppercase letter (except at the\n"
        "start) and lowercase everything.",
        "    out = []\n    for i, c in enumerate(s):\n        if c.isupper() and i:\n            out.append('_')\n"
        "        out.append(c.lower())\n    return ''.join(out)\n",
        (
            "assert candidate('camelCase') == 'camel_case'",
            "assert candidate('getHTTP') == 'get_h_t_t_p'",
            "assert candidate('x') == 'x'",
        ),
        _camel,
    ),
    BuiltinFunction(
        "count_inversions",
        "xs: list[int]) -> int",
        "Count the pairs i < j with xs[i] > xs[j].",
        "    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] > xs[j])\n",
        ("assert candidate([]) == 0", "assert candidate([3, 1, 2]) == 2", "assert candidate([1, 2, 3]) == 0"),
        lambda r: (_ints(r, r.randint(0, 9), 0, 9),),
    ),
    BuiltinFunction(
        "triangle_kind",
        "a: int, b: int, c: int) -> str",
        "Classify side lengths a, b, c > 0: 'invalid' unless each side is shorter than the sum of the other two,\n"
        "otherwise 'equilateral' (all equal), 'isosceles' (exactly two equal) or 'scalene'.",
        "    x, y, z = sorted((a, b, c))\n    if x + y <= z:\n        return 'invalid'\n    if x == z:\n"
        "        return 'equilateral'\n    if x == y or y == z:\n        return 'isosceles'\n    return 'scalene'\n",
        (
            "assert candidate(2, 2, 2) == 'equilateral'",
            "assert candidate(2, 2, 3) == 'isosceles'",
            "assert candidate(3, 4, 5) == 'scalene'",
            "assert candidate(1, 2, 3) == 'invalid'",
        ),
        _triangle_args,
    ),
    BuiltinFunction(
        "sum_multiples",
        "n: int) -> int",
        "Return the sum of the natural numbers below n that are multiples of 3 or 5.",
        "    return sum(i for i in range(n) if i % 3 == 0 or i % 5 == 0)\n",
        ("assert candidate(10) == 23", "assert candidate(0) == 0", "assert candidate(16) == 60"),
        lambda r: (r.randint(0, 400),),
    ),
)


def _generated_asserts(fn: BuiltinFunction, seed: int) -> list[str]:
    """Extra asserts for this seed: random inputs, outputs of the canonical solution."""
    impl = _builtin_impl(fn)
    rng = random.Random(f"{_SALT}:{seed}:{fn.name}")
    out: list[str] = []
    for _ in range(EXTRA_CASES):
        args = fn.gen(rng)
        expected = impl(*copy.deepcopy(args))
        call = f"candidate({', '.join(repr(a) for a in args)})"
        if expected is None or isinstance(expected, bool):
            out.append(f"assert {call} is {expected!r}")
        else:
            out.append(f"assert {call} == {expected!r}")
    return out


def builtin_records(seed: int) -> list[FunctionRecord]:
    """Every built-in function as a validated record, in the seed's order, with the seed's extra asserts."""
    order = list(BUILTINS)
    random.Random(f"{_SALT}:{seed}:order").shuffle(order)
    return [validate_record(fn.record(_generated_asserts(fn, seed)), f"built-in {fn.name}") for fn in order]


def _builtin_impl(fn: BuiltinFunction) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    source = compile(fn.prompt() + fn.body, f"<function-impl {fn.name}>", "exec")
    exec(source, namespace)  # trusted built-in code
    impl: Callable[..., Any] = namespace[fn.name]
    return impl


def builtin_fingerprints() -> set[str]:
    """Behaviour fingerprints of the one-argument built-ins, so no composed function repeats one of them."""
    return fingerprints_of([(_builtin_impl(fn), parameter_type(fn.signature)) for fn in BUILTINS])


def composed_items(seed: int, count: int) -> list[tuple[Composed, FunctionRecord]]:
    """The seed's first ``count`` composed functions with their validated records."""
    chosen = composed_functions(seed, count, builtin_fingerprints()) if count > 0 else []
    return [(c, validate_record(c.record(seed), f"composed {c.name}")) for c in chosen]


@dataclass(frozen=True)
class FunctionImplGenerator:
    """Generates function-impl tasks; stateless, so one instance serves every call.

    The first tasks of a seed are the built-ins (in the seed's order); beyond them come composed
    functions (:mod:`.function_impl_compose`), each distinct in behaviour from every other task. Asking
    for at most ``len(BUILTINS)`` tasks gives the same bytes as before composed functions existed.
    """

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        """Write n tasks (distinct functions) to out/<id>/; the same (n, seed) gives the same bytes."""
        check_n(n)
        if n > MAX_N:
            raise ConfigError(f"function-impl has only {MAX_N} distinct functions per seed; asked for n={n}")
        records = builtin_records(seed)[:n]
        composed = composed_items(seed, n - len(records))
        records += [rec for _, rec in composed]
        if len({r.spec_id for r in records}) != len(records):
            raise TaskError("function-impl: generated functions have clashing ids")
        builtin = {r.entry_point for r in records[: len(records) - len(composed)]}
        by_name = {c.name: c for c, _ in composed}

        def meta(rec: FunctionRecord) -> RecordMeta:
            if rec.entry_point in builtin:
                return RecordMeta(tags=("builtin",))
            c = by_name[rec.entry_point]
            return RecordMeta(tags=("composed", f"source-{c.source.key}"), difficulty=c.tier)

        def extra_hidden(rec: FunctionRecord) -> dict[str, str | bytes]:
            if rec.entry_point in builtin:
                return dynamic_files(rec)
            return dynamic_hidden_files(rec, by_name[rec.entry_point].dynamic_spec())

        items = [(r, Provenance(generator=GENERATOR, seed=seed, source=_source(r, by_name))) for r in records]
        return write_function_tasks(items, Path(out), extra_hidden=extra_hidden, meta=meta)


def _source(rec: FunctionRecord, composed: dict[str, Composed]) -> str:
    c = composed.get(rec.entry_point)
    return f"builtin:{rec.task_id}" if c is None else f"composed:{c.key}"
