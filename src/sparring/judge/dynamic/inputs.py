"""Dynamically generated tests: fresh seeded inputs each evaluation, differential against the reference.

A task opts in with ``hidden/dynamic.json``::

    {"module": "solution", "function": "clamp", "cases": 40, "repeat": 2,
     "args": [{"int": [-50, 50]}, {"int": [-50, 0]}, {"int": [0, 50]}]}

Argument strategies: ``{"int": [lo, hi]}``, ``{"float": [lo, hi]}``,
``{"bool": true}``, ``{"choice": [v, ...]}``, ``{"str": {"alphabet": "ab ",
"min": 0, "max": 8}}``, ``{"list": {"of": S, "min": 0, "max": 6, "sorted": false}}``,
``{"tuple": [S, ...]}``, ``{"matrix": {"of": S, "rows": [lo, hi], "cols": [lo, hi]}}``
(a list of equally long lists), ``{"one_of": [S, ...]}`` and ``{"mutate": [SEED, ...]}`` (one
seed value, mutated keeping its type and a domain inferred from all the seeds:
:mod:`sparring.judge.dynamic.mutation`; seeds are input JSON, see
:func:`~sparring.tasks.dynamic_format.to_input`). An optional
``"where": [["<=", i, j], ...]`` relates arguments by index (``<=``, ``<``,
``!=``); argument tuples that break it are drawn again.

Inputs outside the function's domain: by default (``"reference_raises": "match"``) the
candidate must raise the reference's exception type. With ``"reference_raises": "skip"``
(imported tasks, whose mutated inputs may leave the documented domain) an input on which the
reference raises, or runs past ``"call_timeout_s"`` (a per-call CPU-time limit, none by default), is
unusable and scores nothing either way, like an input whose reference result is not plain data.

Each evaluation draws ``cases`` fresh argument tuples from a seed, repeats each
``repeat`` times and shuffles the whole list (so a solution that special-cases
the visible examples, or counts its calls, disagrees with itself or with the
reference). The reference solution and the candidate each run in their own
process (:mod:`sparring.judge.inside.judge_driver`); their outputs cross as
exact-typed plain data and are compared here, on the host.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.errors import TaskError
from sparring.judge.dynamic.mutation import mutate
from sparring.tasks import taskfs
from sparring.tasks.dynamic_format import DYNAMIC_FILE

MAX_CASES = 2000
MAX_REDRAWS = 200
REFERENCE_RAISES = frozenset({"match", "skip"})
MAX_CALL_TIMEOUT_S = 60.0
DYNAMIC_BUDGET = 0.5
"""With a per-call limit, a driver run stops calling after this fraction of the judge timeout."""
RELATIONS = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, "!=": lambda a, b: a != b}


@dataclass(frozen=True)
class DynamicSpec:
    module: str
    function: str
    args: list[dict[str, Any]]
    cases: int = 40
    repeat: int = 2
    where: tuple[tuple[str, int, int], ...] = ()
    reference_raises: str = "match"
    call_timeout_s: float | None = None

    def job(self, seed: int, judge_timeout_s: float) -> dict[str, Any]:
        """The driver's job for one evaluation (:mod:`sparring.judge.inside.judge_driver`).

        With a per-call limit the driver also gets a wall budget (:data:`DYNAMIC_BUDGET` of the judge
        timeout), so many slow calls cannot add up past the driver's own timeout.
        """
        job: dict[str, Any] = {"module": self.module, "function": self.function,
                               "inputs": make_inputs(self, seed)}  # fmt: skip
        if self.call_timeout_s is not None:
            job["call_timeout_s"] = self.call_timeout_s
            job["budget_s"] = judge_timeout_s * DYNAMIC_BUDGET
        return job


def load_dynamic(hidden: Path) -> DynamicSpec | None:
    p = hidden / DYNAMIC_FILE
    data = taskfs.read_file(hidden, DYNAMIC_FILE)  # a regular file of the task's, never through a link
    if data is None:
        return None
    try:
        raw = json.loads(data)
        spec = DynamicSpec(
            module=str(raw["module"]),
            function=str(raw["function"]),
            args=list(raw["args"]),
            cases=int(raw.get("cases", 40)),
            repeat=int(raw.get("repeat", 2)),
            where=tuple((str(op), int(i), int(j)) for op, i, j in raw.get("where", [])),
            reference_raises=str(raw.get("reference_raises", "match")),
            call_timeout_s=float(raw["call_timeout_s"]) if raw.get("call_timeout_s") is not None else None,
        )
        if spec.reference_raises not in REFERENCE_RAISES:
            raise ValueError(f"reference_raises must be one of {sorted(REFERENCE_RAISES)}")
        if spec.call_timeout_s is not None and not 0 < spec.call_timeout_s <= MAX_CALL_TIMEOUT_S:
            raise ValueError(f"call_timeout_s must be in (0, {MAX_CALL_TIMEOUT_S}]")
        for op, i, j in spec.where:
            if op not in RELATIONS or not (0 <= i < len(spec.args) and 0 <= j < len(spec.args)):
                raise ValueError(f"bad relation {[op, i, j]}")
    except (KeyError, TypeError, ValueError) as e:
        raise TaskError(
            f"{p}: malformed dynamic test spec ({e}); see sparring.judge.dynamic.inputs"
        ) from None
    if not 1 <= spec.cases * spec.repeat <= MAX_CASES:
        raise TaskError(f"{p}: cases*repeat must be in 1..{MAX_CASES}")
    return spec


def draw(strategy: dict[str, Any], rng: random.Random) -> Any:
    """One value from a strategy (see the module docstring); tuples are tagged for JSON."""
    ((kind, arg),) = strategy.items()
    if kind == "int":
        return rng.randint(int(arg[0]), int(arg[1]))
    if kind == "float":
        return round(rng.uniform(float(arg[0]), float(arg[1])), 6)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "choice":
        return rng.choice(list(arg))
    if kind == "str":
        alphabet = str(arg.get("alphabet", "abc"))
        return "".join(
            rng.choice(alphabet) for _ in range(rng.randint(int(arg.get("min", 0)), int(arg.get("max", 8))))
        )
    if kind == "list":
        xs = [
            draw(arg["of"], rng) for _ in range(rng.randint(int(arg.get("min", 0)), int(arg.get("max", 6))))
        ]
        return sorted(xs) if arg.get("sorted") else xs
    if kind == "tuple":
        return {"tuple": [draw(s, rng) for s in arg]}
    if kind == "matrix":
        rows, cols = rng.randint(*map(int, arg["rows"])), rng.randint(*map(int, arg["cols"]))
        return [[draw(arg["of"], rng) for _ in range(cols)] for _ in range(rows)]
    if kind == "one_of":
        return draw(rng.choice(list(arg)), rng)
    if kind == "mutate":
        return mutate(list(arg), rng)
    raise TaskError(f"unknown dynamic argument strategy {kind!r}")


def _draw_args(spec: DynamicSpec, rng: random.Random) -> list[Any]:
    for _ in range(MAX_REDRAWS):
        args = [draw(s, rng) for s in spec.args]
        if all(RELATIONS[op](args[i], args[j]) for op, i, j in spec.where):
            return args
    raise TaskError(
        f"dynamic tests of {spec.function}: no arguments met {list(spec.where)} in {MAX_REDRAWS} draws"
    )


def make_inputs(spec: DynamicSpec, seed: int) -> list[list[Any]]:
    """``cases`` fresh argument lists, each repeated ``repeat`` times, shuffled; a pure function of the seed."""
    rng = random.Random(seed)
    try:
        base = [_draw_args(spec, rng) for _ in range(spec.cases)]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise TaskError(f"dynamic tests of {spec.function}: malformed argument strategy ({e!r})") from None
    out = [list(a) for a in base for _ in range(spec.repeat)]
    rng.shuffle(out)
    return out


def usable_cases(reference: list[dict[str, Any]], reference_raises: str = "match") -> list[int]:
    """Indices of the inputs that score: the reference's result is plain data (``bad``: not) and it
    did not time out; with ``reference_raises="skip"``, also not an exception."""
    skip = {"bad", "timeout", "raised"} if reference_raises == "skip" else {"bad", "timeout"}
    return [i for i, r in enumerate(reference) if not skip.intersection(r)]


def compare(
    reference: list[dict[str, Any]], candidate: list[dict[str, Any]] | None, reference_raises: str = "match"
) -> tuple[float, int]:
    """(fraction of usable inputs where the candidate's exact-typed result equals the reference's, mismatches).

    Unusable inputs (:func:`usable_cases`) are skipped.
    """
    usable = usable_cases(reference, reference_raises)
    if not usable:
        return 0.0, 0
    if candidate is None or len(candidate) != len(reference):
        return 0.0, len(usable)
    same = sum(
        1
        for i in usable
        if json.dumps(candidate[i], sort_keys=True) == json.dumps(reference[i], sort_keys=True)
    )
    return same / len(usable), len(usable) - same
