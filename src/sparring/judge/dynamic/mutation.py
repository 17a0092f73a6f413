"""Type-aware mutation of seed inputs (EvalPlus-style), the ``{"mutate": [seed, ...]}`` strategy.

A task that has only example inputs (an imported record's ``assert candidate(...) == ...`` lines)
gets fresh inputs by mutating them: draw one seed value of an argument position and change it
keeping its exact type and a conservative domain inferred from *all* seeds of that position:

``bool``         a fresh coin flip;
``int``          the seed ± 1..3, a value in the seeds' range widened by a quarter of its width
                 (at least 2), or a bound of that range; never below 0 (1) if no seed is;
``float``        likewise, with a relative jitter; non-negative if every seed is;
``str``          1-3 inserts, deletes or replacements of characters drawn from the seeds' own
                 characters; length within [shortest seed - 1, longest seed + 2];
``list`` /       elements mutated recursively, dropped, duplicated or inserted (an element of
``tuple``        the same depth of any seed of the position, of a type the sequence holds,
                 mutated); lengths within [shortest - 1, longest + 2] of the seeds' sequences
                 at that depth, empty only if one is; tuples of one length keep it;
``dict``         values mutated recursively, keys unchanged;
anything else    (None, sets, bytes) unchanged.

Mutated sizes never pass :data:`MAX_LEN` and the domain is bounded by the seeds, so a reference that
handled the seeds is not asked to handle inputs orders of magnitude bigger. The result is a
pure function of the seeds and the ``rng`` state (character sets are sorted, never iterated in
hash order).

Seeds and results are *input JSON*: :func:`sparring.tasks.dynamic_format.to_input` tags tuples, dicts, sets and bytes the
way :func:`sparring.judge.inside.judge_driver.decode_args` reads them back.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sparring.judge.inside.judge_driver import decode_args
from sparring.tasks.dynamic_format import to_input

MAX_LEN = 256
"""No mutated string or sequence is longer than this (a seed drawn unchanged is passed as written)."""
MAX_OPS = 3
P_UNCHANGED = 0.1


@dataclass(frozen=True)
class Level:
    """What the seeds say about the sequences at one depth of nesting (0: the argument itself)."""

    seq_len: tuple[int, int]
    tuple_len: int | None
    pool: tuple[Any, ...]


@dataclass(frozen=True)
class Domain:
    """What the seeds of one argument position say about it (scalars pooled over every depth)."""

    ints: tuple[int, int] | None
    floats: tuple[float, float] | None
    chars: str
    str_len: tuple[int, int]
    levels: tuple[Level, ...]

    def level(self, depth: int) -> Level | None:
        return self.levels[depth] if depth < len(self.levels) else None


def _walk(x: Any, acc: dict[str, list[Any]], levels: list[dict[str, list[Any]]], depth: int) -> None:
    t = type(x)
    if t is int:
        acc["ints"].append(x)
    elif t is float:
        acc["floats"].append(x)
    elif t is str:
        acc["strs"].append(x)
    elif t is list or t is tuple or t is dict:
        while len(levels) <= depth:
            levels.append({"lists": [], "tuples": [], "pool": []})
        lv = levels[depth]
        if t is dict:
            for v in x.values():
                _walk(v, acc, levels, depth + 1)
            return
        lv["tuples" if t is tuple else "lists"].append(len(x))
        for v in x:
            lv["pool"].append(v)
            _walk(v, acc, levels, depth + 1)


def _span(lengths: list[int]) -> tuple[int, int]:
    """Lengths near the seeds': one shorter (never empty unless a seed is) to two longer."""
    if not lengths:
        return (0, 0)
    lo = min(lengths)
    return (max(lo - 1, 0 if lo == 0 else 1), min(max(lengths) + 2, MAX_LEN))


def infer_domain(seeds: list[Any]) -> Domain:
    acc: dict[str, list[Any]] = {"ints": [], "floats": [], "strs": []}
    levels: list[dict[str, list[Any]]] = []
    for s in seeds:
        _walk(s, acc, levels, 0)
    ints = floats = None
    if acc["ints"]:
        lo, hi = min(acc["ints"]), max(acc["ints"])
        w = max(2, (hi - lo) // 4)
        ints = (max(lo - w, 1 if lo >= 1 else 0 if lo >= 0 else lo - w), hi + w)
    if acc["floats"]:
        flo, fhi = min(acc["floats"]), max(acc["floats"])
        fw = (fhi - flo) / 4 or max(abs(fhi) / 2, 1.0)
        floats = (max(flo - fw, 0.0) if flo >= 0 else flo - fw, fhi + fw)
    return Domain(
        ints=ints,
        floats=floats,
        chars="".join(sorted({c for s in acc["strs"] for c in s})),
        str_len=_span([len(s) for s in acc["strs"]]),
        levels=tuple(
            Level(
                seq_len=_span(lv["lists"] + lv["tuples"]),
                tuple_len=lv["tuples"][0] if len(set(lv["tuples"])) == 1 else None,
                pool=tuple(lv["pool"]),
            )
            for lv in levels
        ),
    )


def _int(x: int, d: Domain, rng: random.Random) -> int:
    assert d.ints is not None
    lo, hi = d.ints
    r = rng.random()
    if r < 0.45:
        v = x + rng.choice((-3, -2, -1, 1, 2, 3))
    elif r < 0.85:
        v = rng.randint(lo, hi)
    else:
        v = rng.choice((lo, hi))
    return min(max(v, lo), hi)


def _float(x: float, d: Domain, rng: random.Random) -> float:
    assert d.floats is not None
    lo, hi = d.floats
    if rng.random() < 0.5:
        v = x * (1 + rng.uniform(-0.25, 0.25)) + rng.uniform(-0.5, 0.5) * (hi - lo) / 8
    else:
        v = rng.uniform(lo, hi)
    return float(min(max(round(v, 6), lo), hi))


def _str(x: str, d: Domain, rng: random.Random) -> str:
    chars = d.chars or "".join(sorted(set(x)))
    lo, hi = d.str_len
    s = list(x[:MAX_LEN])
    for _ in range(rng.randint(1, MAX_OPS)):
        op = rng.randrange(3)
        if op == 0 and chars and len(s) < hi:
            s.insert(rng.randint(0, len(s)), rng.choice(chars))
        elif op == 1 and len(s) > lo:
            del s[rng.randrange(len(s))]
        elif s and chars:
            s[rng.randrange(len(s))] = rng.choice(chars)
    return "".join(s)


def _seq(x: list[Any], d: Domain, rng: random.Random, depth: int, tuple_: bool) -> list[Any]:
    lv = d.level(depth)
    if lv is None:
        return x
    fixed = tuple_ and lv.tuple_len is not None
    lo, hi = lv.seq_len
    # Inserted elements come from this depth's pool, of a type already in the sequence (if any).
    types = {type(v) for v in x}
    pool = [v for v in lv.pool if not types or type(v) in types]
    s = list(x[:MAX_LEN])
    for _ in range(rng.randint(1, MAX_OPS)):
        op = 0 if fixed else rng.randrange(4)
        if op == 0 and s:
            i = rng.randrange(len(s))
            s[i] = _mutate(s[i], d, rng, depth + 1)
        elif op == 1 and len(s) > lo:
            del s[rng.randrange(len(s))]
        elif op == 2 and s and len(s) < hi:
            s.insert(rng.randint(0, len(s)), rng.choice(s))
        elif op == 3 and pool and len(s) < hi:
            s.insert(rng.randint(0, len(s)), _mutate(rng.choice(pool), d, rng, depth + 1))
    return s


def _mutate(x: Any, d: Domain, rng: random.Random, depth: int = 0) -> Any:
    t = type(x)
    if t is bool:
        return rng.random() < 0.5
    if t is int:
        return _int(x, d, rng)
    if t is float:
        return _float(x, d, rng)
    if t is str:
        return _str(x, d, rng)
    if t is list:
        return _seq(x, d, rng, depth, tuple_=False)
    if t is tuple:
        return tuple(_seq(list(x), d, rng, depth, tuple_=True))
    if t is dict and x:
        keys = list(x)
        pick = set(rng.sample(range(len(keys)), rng.randint(1, len(keys))))
        return {k: _mutate(v, d, rng, depth + 1) if i in pick else v for i, (k, v) in enumerate(x.items())}
    return x


def mutate(seeds: list[Any], rng: random.Random) -> Any:
    """One fresh input (as input JSON) from ``seeds`` (input JSON): a seed, mutated in its domain."""
    values = [decode_args(s) for s in seeds]
    if not values:
        raise ValueError("a mutate strategy needs at least one seed value")
    x = rng.choice(values)
    if rng.random() >= P_UNCHANGED:
        x = _mutate(x, infer_domain(values), rng)
    return to_input(x)
