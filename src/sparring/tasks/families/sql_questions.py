"""Questions of the ``sql`` family: each template yields the question, its gold query and an
independent Python computation of the answer.

Gold queries are right by construction twice over: the SQL is written from the
template's parameters, and the same answer is computed from the rows in plain
Python (no SQL involved); the generator runs both on the given and on the
perturbed database and refuses to write a task where they differ. ``ordered``
says whether the question asks for an order (then every ordering is total: ties
are broken by a unique id the question names).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparring.tasks.families.sql_data import Database, Domain, Row

Result = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Question:
    template: str
    tier: int
    text: str
    sql: str
    compute: Callable[[Database], Result]
    ordered: bool
    columns: tuple[str, ...]


TEMPLATES: tuple[tuple[str, int], ...] = (
    ("filter_people", 1),
    ("join_list", 2),
    ("ordered_items", 2),
    ("group_count_sum", 2),
    ("range_count", 2),
    ("revenue_by_group", 3),
    ("avg_by_group", 3),
    ("top_k", 3),
    ("max_per_person", 3),
    ("distinct_items", 3),
    ("having_count", 4),
    ("anti_join", 4),
    ("left_join_zero", 5),
)

# The parameters each template's question takes (see question_params): v a fact category, w an item
# category, c1/c2 a person's first/second category, k a top-k size, t a count threshold, lo/hi a range.
PARAMS: dict[str, tuple[str, ...]] = {
    "filter_people": ("c2",),
    "join_list": ("v", "w"),
    "ordered_items": ("w",),
    "group_count_sum": ("v",),
    "range_count": ("lo", "hi"),
    "revenue_by_group": ("v",),
    "avg_by_group": (),
    "top_k": ("v", "k"),
    "max_per_person": ("c1", "v"),
    "distinct_items": ("w",),
    "having_count": ("v", "t"),
    "anti_join": ("v",),
    "left_join_zero": ("c1", "v"),
}
RANGES = tuple((lo, lo + width) for lo in range(1, 7) for width in (1, 2, 3))  # fact amounts are 1..9


@dataclass(frozen=True)
class QuestionKey:
    """One point of the question space: a domain, a template and its parameters."""

    domain: int
    template: str
    tier: int
    params: tuple[tuple[str, Any], ...]


def _values(name: str, d: Domain) -> list[Any]:
    if name in ("v", "w", "c1", "c2"):
        return list({"v": d.fcat_values, "w": d.ic_values, "c1": d.pc1_values, "c2": d.pc2_values}[name])
    if name == "k":
        return [3, 4, 5]
    if name == "t":
        return [2, 3, 4]
    raise KeyError(name)


def question_params(template: str, d: Domain) -> list[dict[str, Any]]:
    """Every parameter choice of ``template`` over domain ``d``, in a fixed order."""
    names = PARAMS[template]
    if names == ("lo", "hi"):
        return [{"lo": lo, "hi": hi} for lo, hi in RANGES]
    out: list[dict[str, Any]] = [{}]
    for name in names:
        out = [{**o, name: x} for o in out for x in _values(name, d)]
    return out


def question_space(domains: tuple[Domain, ...]) -> list[QuestionKey]:
    """Every distinct question the family can ask, in a fixed order (a seed picks a permutation)."""
    return [
        QuestionKey(i, template, tier, tuple(sorted(p.items())))
        for i, d in enumerate(domains)
        for template, tier in TEMPLATES
        for p in question_params(template, d)
    ]


def _by_id(rows: list[Row]) -> dict[int, Row]:
    return {r["id"]: r for r in rows}


def make_question(template: str, tier: int, d: Domain, params: dict[str, Any]) -> Question:
    """Question ``template`` over domain ``d`` with ``params`` (one of :func:`question_params`)."""
    v, w, c1, c2 = (params.get(x) for x in ("v", "w", "c1", "c2"))
    P, I, F = d.people, d.items, d.facts  # noqa: N806, E741 - table names
    joins = f"FROM {F} f JOIN {P} p ON p.id = f.{d.pfk} JOIN {I} i ON i.id = f.{d.ifk}"

    if template == "filter_people":

        def filter_people(db: Database) -> Result:
            return [(p["name"], p[d.pc1]) for p in db.people if p[d.pc2] == c2]

        return Question(template, tier,
                        f"List the name and {d.pc1} of every {d.person} whose {d.pc2} is '{c2}', one row per "
                        f"{d.person} (two {d.people} may share a name: keep both rows).",
                        f"SELECT name, {d.pc1} FROM {P} WHERE {d.pc2} = '{c2}'", filter_people, False,
                        ("name", d.pc1))  # fmt: skip
    if template == "join_list":

        def join_list(db: Database) -> Result:
            ppl, its = _by_id(db.people), _by_id(db.items)
            return [(ppl[f[d.pfk]][d.pc1],) for f in db.facts if f[d.fcat] == v and its[f[d.ifk]][d.ic] == w]

        return Question(template, tier,
                        f"For every {d.fact} whose {d.fcat} is '{v}' and whose {d.item} has {d.ic} '{w}', give "
                        f"the {d.pc1} of the {d.fact}'s {d.person}: one row per {d.fact}, so a value appears as "
                        "many times as there are such rows.",
                        f"SELECT p.{d.pc1} {joins} WHERE f.{d.fcat} = '{v}' AND i.{d.ic} = '{w}'", join_list,
                        False, (d.pc1,))  # fmt: skip
    if template == "ordered_items":

        def ordered_items(db: Database) -> Result:
            sel = [i for i in db.items if i[d.ic] == w]
            return [(i["id"], i[d.inum]) for i in sorted(sel, key=lambda i: (-i[d.inum], i["id"]))]

        return Question(template, tier,
                        f"List the id and {d.inum} of every {d.item} whose {d.ic} is '{w}', ordered by {d.inum} "
                        "from highest to lowest, ties broken by id (smallest first).",
                        f"SELECT id, {d.inum} FROM {I} WHERE {d.ic} = '{w}' ORDER BY {d.inum} DESC, id ASC",
                        ordered_items, True, ("id", d.inum))  # fmt: skip
    if template == "group_count_sum":

        def group_count_sum(db: Database) -> Result:
            its = _by_id(db.items)
            acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for f in db.facts:
                if f[d.fcat] == v:
                    a = acc[its[f[d.ifk]][d.ic]]
                    a[0] += 1
                    a[1] += f[d.fint]
            return [(k, n, s) for k, (n, s) in acc.items()]

        return Question(template, tier,
                        f"For each {d.item} {d.ic}, give the {d.ic}, the number of {d.facts} whose {d.fcat} is "
                        f"'{v}' of {d.items} in it, and the sum of those {d.facts}' {d.fint}; leave out a {d.ic} "
                        f"with no such {d.fact}.",
                        f"SELECT i.{d.ic}, COUNT(*), SUM(f.{d.fint}) FROM {F} f JOIN {I} i ON i.id = f.{d.ifk} "
                        f"WHERE f.{d.fcat} = '{v}' GROUP BY i.{d.ic}", group_count_sum, False,
                        (d.ic, "count", f"sum_{d.fint}"))  # fmt: skip
    if template == "revenue_by_group":

        def revenue_by_group(db: Database) -> Result:
            ppl, its = _by_id(db.people), _by_id(db.items)
            acc: dict[str, float] = defaultdict(float)
            for f in db.facts:
                if f[d.fcat] == v:
                    acc[ppl[f[d.pfk]][d.pc1]] += f[d.fint] * its[f[d.ifk]][d.inum]
            return list(acc.items())

        return Question(template, tier,
                        f"For each {d.person} {d.pc1}, give the {d.pc1} and the total of {d.fint} × {d.inum} "
                        f"(the {d.item}'s {d.inum}) over the {d.facts} whose {d.fcat} is '{v}' of {d.people} "
                        f"in that {d.pc1}; leave out a {d.pc1} with no such {d.fact}.",
                        f"SELECT p.{d.pc1}, SUM(f.{d.fint} * i.{d.inum}) {joins} WHERE f.{d.fcat} = '{v}' "
                        f"GROUP BY p.{d.pc1}", revenue_by_group, False, (d.pc1, "total"))  # fmt: skip
    if template == "avg_by_group":

        def avg_by_group(db: Database) -> Result:
            ppl = _by_id(db.people)
            acc: dict[str, list[int]] = defaultdict(list)
            for f in db.facts:
                acc[ppl[f[d.pfk]][d.pc2]].append(f[d.fint])
            return [(k, sum(xs) / len(xs)) for k, xs in acc.items()]

        return Question(template, tier,
                        f"For each {d.person} {d.pc2}, give the {d.pc2} and the average {d.fint} of all "
                        f"{d.facts} of {d.people} with that {d.pc2} (every {d.fcat}); leave out a {d.pc2} "
                        f"with no {d.facts}.",
                        f"SELECT p.{d.pc2}, AVG(f.{d.fint}) FROM {F} f JOIN {P} p ON p.id = f.{d.pfk} "
                        f"GROUP BY p.{d.pc2}", avg_by_group, False, (d.pc2, f"avg_{d.fint}"))  # fmt: skip
    if template == "top_k":
        k = params["k"]

        def top_k(db: Database) -> Result:
            its = _by_id(db.items)
            tot: Counter[int] = Counter()
            for f in db.facts:
                if f[d.fcat] == v:
                    tot[f[d.ifk]] += f[d.fint]
            best = sorted(tot, key=lambda i: (-tot[i], i))[:k]
            return [(its[i]["name"], tot[i]) for i in best]

        return Question(template, tier,
                        f"Which {k} {d.items} have the largest total {d.fint} over {d.facts} whose {d.fcat} is "
                        f"'{v}'? Give each {d.item}'s name and that total, largest total first, ties broken by "
                        f"the {d.item}'s id (smallest first); only {d.items} with at least one such {d.fact} count.",
                        f"SELECT i.name, SUM(f.{d.fint}) AS total FROM {F} f JOIN {I} i ON i.id = f.{d.ifk} "
                        f"WHERE f.{d.fcat} = '{v}' GROUP BY i.id ORDER BY total DESC, i.id ASC LIMIT {k}",
                        top_k, True, ("name", "total"))  # fmt: skip
    if template == "having_count":
        t = params["t"]

        def having_count(db: Database) -> Result:
            n: Counter[int] = Counter(f[d.pfk] for f in db.facts if f[d.fcat] == v)
            return [(p["name"], n[p["id"]]) for p in db.people if n[p["id"]] >= t]

        return Question(template, tier,
                        f"Give the name and the number of {d.facts} whose {d.fcat} is '{v}' of every {d.person} "
                        f"with at least {t} such {d.facts}, one row per {d.person}.",
                        f"SELECT p.name, COUNT(*) FROM {F} f JOIN {P} p ON p.id = f.{d.pfk} WHERE f.{d.fcat} = "
                        f"'{v}' GROUP BY p.id HAVING COUNT(*) >= {t}", having_count, False,
                        ("name", "count"))  # fmt: skip
    if template == "anti_join":

        def anti_join(db: Database) -> Result:
            has = {f[d.pfk] for f in db.facts if f[d.fcat] == v}
            return [(p["name"],) for p in db.people if p["id"] not in has]

        return Question(template, tier,
                        f"Give the name of every {d.person} who has no {d.fact} whose {d.fcat} is '{v}', one "
                        f"row per {d.person} (two {d.people} may share a name: keep both rows).",
                        f"SELECT name FROM {P} WHERE id NOT IN (SELECT {d.pfk} FROM {F} WHERE {d.fcat} = '{v}')",
                        anti_join, False, ("name",))  # fmt: skip
    if template == "left_join_zero":

        def left_join_zero(db: Database) -> Result:
            n: Counter[int] = Counter(f[d.pfk] for f in db.facts if f[d.fcat] == v)
            return [(p["id"], n[p["id"]]) for p in db.people if p[d.pc1] == c1]

        return Question(template, tier,
                        f"For every {d.person} whose {d.pc1} is '{c1}', give the {d.person}'s id and the number "
                        f"of their {d.facts} whose {d.fcat} is '{v}' — including {d.people} with none (0).",
                        f"SELECT p.id, COUNT(f.id) FROM {P} p LEFT JOIN {F} f ON f.{d.pfk} = p.id AND "
                        f"f.{d.fcat} = '{v}' WHERE p.{d.pc1} = '{c1}' GROUP BY p.id", left_join_zero, False,
                        ("id", "count"))  # fmt: skip
    if template == "range_count":
        lo, hi = params["lo"], params["hi"]

        def range_count(db: Database) -> Result:
            its = _by_id(db.items)
            n: Counter[str] = Counter(its[f[d.ifk]][d.ic] for f in db.facts if lo <= f[d.fint] <= hi)
            return list(n.items())

        return Question(template, tier,
                        f"For each {d.item} {d.ic}, give the {d.ic} and the number of {d.facts} of {d.items} "
                        f"in it whose {d.fint} is between {lo} and {hi} (both included); leave out a {d.ic} "
                        f"with no such {d.fact}.",
                        f"SELECT i.{d.ic}, COUNT(*) FROM {F} f JOIN {I} i ON i.id = f.{d.ifk} WHERE f.{d.fint} "
                        f"BETWEEN {lo} AND {hi} GROUP BY i.{d.ic}", range_count, False, (d.ic, "count"))  # fmt: skip
    if template == "max_per_person":

        def max_per_person(db: Database) -> Result:
            ppl = _by_id(db.people)
            best: dict[int, int] = {}
            for f in db.facts:
                if f[d.fcat] == v and ppl[f[d.pfk]][d.pc1] == c1:
                    best[f[d.pfk]] = max(best.get(f[d.pfk], 0), f[d.fint])
            return list(best.items())

        return Question(template, tier,
                        f"For every {d.person} whose {d.pc1} is '{c1}' and who has at least one {d.fact} whose "
                        f"{d.fcat} is '{v}', give the {d.person}'s id and the largest {d.fint} among those "
                        f"{d.facts}.",
                        f"SELECT p.id, MAX(f.{d.fint}) FROM {F} f JOIN {P} p ON p.id = f.{d.pfk} WHERE "
                        f"p.{d.pc1} = '{c1}' AND f.{d.fcat} = '{v}' GROUP BY p.id", max_per_person, False,
                        ("id", f"max_{d.fint}"))  # fmt: skip
    if template == "distinct_items":

        def distinct_items(db: Database) -> Result:
            ppl, its = _by_id(db.people), _by_id(db.items)
            seen: dict[str, set[int]] = defaultdict(set)
            for f in db.facts:
                if its[f[d.ifk]][d.ic] == w:
                    seen[ppl[f[d.pfk]][d.pc2]].add(f[d.ifk])
            return [(k, len(ids)) for k, ids in seen.items()]

        return Question(template, tier,
                        f"For each {d.person} {d.pc2}, give the {d.pc2} and the number of different {d.items} "
                        f"of {d.ic} '{w}' that {d.people} with that {d.pc2} have {d.facts} of (a {d.item} "
                        f"counts once however many {d.facts} it has); leave out a {d.pc2} with none.",
                        f"SELECT p.{d.pc2}, COUNT(DISTINCT f.{d.ifk}) FROM {F} f JOIN {P} p ON p.id = f.{d.pfk} "
                        f"JOIN {I} i ON i.id = f.{d.ifk} WHERE i.{d.ic} = '{w}' GROUP BY p.{d.pc2}",
                        distinct_items, False, (d.pc2, "count"))  # fmt: skip
    raise KeyError(template)


def example_question(d: Domain, rng: random.Random) -> tuple[str, str]:
    """The worked example the workspace README shows: (question, query). Never a task's question."""
    v = rng.choice(d.fcat_values)
    return (
        f"How many {d.facts} have {d.fcat} '{v}'?",
        f"SELECT COUNT(*) FROM {d.facts} WHERE {d.fcat} = '{v}'",
    )
