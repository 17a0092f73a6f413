"""Composed ``function-impl`` functions: a source, 0-3 stages and a final, drawn from a seed.

The built-in functions are few; composing parameterised blocks
(:mod:`.function_impl_steps`) gives thousands of candidates. Renamed copies are
not new tasks, so a candidate is kept only if its *behaviour fingerprint* (the
reference's outputs on a fixed probe set shared by every function with the same
argument type) is new, and only if it is not degenerate: it must give several
distinct outputs on the probes and must not just return its argument. The tier
(the task's difficulty) is the number of steps the docstring lists, not
counting a source that only copies the argument.

Everything is a pure function of the seed: candidates come from one random
stream per seed, in order, so the i-th kept function of a seed does not depend
on how many are asked for.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sparring.errors import ConfigError
from sparring.tasks.families.function_impl_steps import FINALS, SOURCES, STAGES, Final, Source, Stage

SALT = "function-impl/composed/1"
STAGE_COUNT_WEIGHTS = (2, 4, 4, 3)
"""Relative weights of 0, 1, 2 and 3 stages between the source and the final."""
EXTRA_CASES = 6
DYNAMIC_CASES = 40
DYNAMIC_REPEAT = 2
MIN_DISTINCT_OUTPUTS = 4
"""A candidate with fewer distinct outputs on the probes is near-constant: a guessed constant would pass often."""
MAX_TRIES_PER_FUNCTION = 60


def _probe_lists() -> tuple[Any, ...]:
    rng = random.Random("function-impl/probes/list")
    edges: tuple[list[int], ...] = ([], [0], [7], [-4, -4], [3, -1, 4, -1, 5, -9, 2, 6], list(range(-5, 6)))
    drawn = [[rng.randint(lo, hi) for _ in range(rng.randint(0, 10))]
             for lo, hi in [(-20, 20), (-3, 3), (0, 9)] * 14]  # fmt: skip
    return (*edges, *drawn)


def _probe_texts() -> tuple[Any, ...]:
    rng = random.Random("function-impl/probes/str")
    edges = ("", "a", "Z", "  ", "aa bb  a", "Hello World 42", "xyz abc", "ab1 BA")
    alphabets = ["abcxyz AB1", "aab  ", "Hello world 42"] * 14
    return (*edges, *("".join(rng.choice(a) for _ in range(rng.randint(0, 14))) for a in alphabets))


PROBES: dict[str, tuple[Any, ...]] = {
    "list[int]": _probe_lists(),
    "int": tuple(range(1, 31)),
    "str": _probe_texts(),
}
"""Probe inputs per argument type, inside the domain of every source of that type (``int``: 1..30, where
both ``range`` (n <= 30) and ``divisors`` (n >= 1) are defined)."""


def fingerprint(fn: Callable[[Any], Any], arg_type: str) -> tuple[str, int] | None:
    """(behaviour fingerprint, distinct outputs) of a one-argument function on the probes of its argument
    type; None if the type has no probes or the function raises on one (it is then not total there)."""
    probes = PROBES.get(arg_type)
    if probes is None:
        return None
    try:
        outs = [repr(fn(copy.deepcopy(p))) for p in probes]
    except Exception:  # noqa: BLE001 - a function not total on the probes has no fingerprint
        return None
    digest = hashlib.sha256(json.dumps([arg_type, outs]).encode()).hexdigest()
    return digest, len(set(outs))


@dataclass(frozen=True)
class Composed:
    """One composed function: ``final(stages(source(arg)))``."""

    source: Source
    stages: tuple[Stage, ...]
    final: Final

    @property
    def key(self) -> str:
        return "|".join([self.source.key, *(s.key for s in self.stages), self.final.key])

    @property
    def tier(self) -> int:
        """Steps the docstring lists beyond copying the argument: 1 (final only) to 5."""
        return len(self.stages) + 1 + (0 if self.source.trivial else 1)

    @property
    def name(self) -> str:
        """A name that says what is returned and from what, unique per composition."""
        h = hashlib.sha256(self.key.encode()).hexdigest()[:8]
        return f"{self.final.key}_of_{self.source.key}_{h}"

    def prompt(self) -> str:
        steps = [self.source.doc, *(s.doc for s in self.stages), self.final.doc]
        lines = [f"Compute the result from {self.source.arg_name} in these steps, in order:", ""]
        for i, doc in enumerate(steps, start=1):
            # a quoted space (' ') must not become a line break: protect it while wrapping
            wrapped = textwrap.wrap(f"{i}. {doc}".replace("' '", "'\0'"), width=100, subsequent_indent="   ")
            lines += [w.replace("\0", " ") for w in wrapped]
        doc = "\n    ".join(lines).replace("\n    \n", "\n\n")
        return f'def {self.name}({self.source.param}) -> {self.final.returns}:\n    """{doc}\n    """\n'

    def body(self) -> str:
        code = [self.source.code, *(s.code for s in self.stages), self.final.code]
        return "".join(f"    {line}\n" for c in code for line in c.split("\n"))

    def compile(self) -> Callable[[Any], Any]:
        namespace: dict[str, Any] = {}
        exec(
            compile(self.prompt() + self.body(), f"<function-impl {self.name}>", "exec"), namespace
        )  # own code
        fn: Callable[[Any], Any] = namespace[self.name]
        return fn

    def record(self, seed: int) -> dict[str, str]:
        """The function-jsonl record: edge-case asserts and the seed's random ones, outputs from the reference."""
        impl = self.compile()
        rng = random.Random(f"{SALT}:{seed}:{self.name}:asserts")
        args = [*self.source.edges, *(self.source.gen(rng) for _ in range(EXTRA_CASES))]
        lines = []
        for a in args:
            expected = impl(copy.deepcopy(a))
            op = "is" if expected is None or isinstance(expected, bool) else "=="
            lines.append(f"assert candidate({a!r}) {op} {expected!r}")
        test = "def check(candidate):\n" + "".join(f"    {line}\n" for line in lines)
        return {"task_id": self.name, "prompt": self.prompt(), "canonical_solution": self.body(), "test": test,
                "entry_point": self.name}  # fmt: skip

    def dynamic_spec(self) -> dict[str, Any]:
        """``hidden/dynamic.json``: fresh inputs from the source's domain at every evaluation."""
        return {"module": "solution", "function": self.name, "cases": DYNAMIC_CASES, "repeat": DYNAMIC_REPEAT,
                "args": [self.source.strategy]}  # fmt: skip


def draw(rng: random.Random) -> Composed:
    """One candidate composition (not yet checked for novelty or degeneracy)."""
    source = rng.choice(SOURCES)
    k = rng.choices(range(len(STAGE_COUNT_WEIGHTS)), weights=STAGE_COUNT_WEIGHTS)[0]
    stages = tuple(rng.choice(STAGES[source.kind]) for _ in range(k))
    return Composed(source, stages, rng.choice(FINALS[source.kind]))


def _usable(c: Composed) -> tuple[str, int] | None:
    fn = c.compile()
    fp = fingerprint(fn, c.source.arg_type)
    if fp is None or fp[1] < MIN_DISTINCT_OUTPUTS:
        return None
    if c.source.trivial and all(fn(copy.deepcopy(p)) == p for p in PROBES[c.source.arg_type]):
        return None  # it returns its argument unchanged
    return fp


def composed_functions(seed: int, count: int, exclude: Iterable[str] = ()) -> list[Composed]:
    """The seed's first ``count`` composed functions, each with a behaviour fingerprint unlike every other's
    and unlike ``exclude`` (the fingerprints of functions already offered, e.g. the built-ins)."""
    rng = random.Random(f"{SALT}:{seed}")
    seen = set(exclude)
    names: set[str] = set()
    out: list[Composed] = []
    tries = 0
    while len(out) < count:
        tries += 1
        if tries > MAX_TRIES_PER_FUNCTION * count:
            raise ConfigError(f"function-impl: found only {len(out)} distinct composed functions for seed {seed} "
                              f"in {tries - 1} draws; ask for fewer tasks")  # fmt: skip
        c = draw(rng)
        if c.name in names:
            continue
        fp = _usable(c)
        if fp is None or fp[0] in seen:
            continue
        seen.add(fp[0])
        names.add(c.name)
        out.append(c)
    return out


def parameter_type(signature: str) -> str | None:
    """The type of a one-parameter signature as :class:`BuiltinFunction` writes it (``xs: list[int]) -> int``);
    None for other arities."""
    params = signature.split(")")[0]
    if params.count(":") != 1:
        return None
    return params.split(":")[1].strip()


def fingerprints_of(functions: Sequence[tuple[Callable[[Any], Any], str | None]]) -> set[str]:
    """Fingerprints of (function, argument type) pairs that have one."""
    out = set()
    for fn, arg_type in functions:
        fp = fingerprint(fn, arg_type) if arg_type is not None else None
        if fp is not None:
            out.add(fp[0])
    return out


__all__ = [
    "PROBES",
    "Composed",
    "composed_functions",
    "draw",
    "fingerprint",
    "fingerprints_of",
    "parameter_type",
]
