"""The ``sql`` family: a generated SQLite database and a question; the answer is a query.

The agent writes one read-only ``SELECT`` to ``answer.sql``. The hidden test runs
it, in the judge's sandbox, on two pristine databases held in hidden/ (never the
workspace's copy, which the agent may have edited): the database the agent was
given, and a *perturbed* copy it never sees (:func:`sql_data.perturb`). Each
result is compared with the expected result as a **multiset**: rows are tuples,
duplicates count, order counts only where the question asks for one, numbers are
compared after rounding to two decimals (the stated tolerance; the generator
keeps every expected number at least 1e-6 from a rounding boundary so the
rounding never decides). Both comparisons are ``assert L == C`` with C a
constant, so the expected rows stay on the host (:mod:`sparring.judge.dynamic.probe`).

A query that hard-codes the given database's answer fails on the perturbed copy;
``SELECT DISTINCT`` (set semantics) fails wherever the answer has duplicate rows;
a write, ``ATTACH`` or ``PRAGMA`` is denied by an authorizer on a read-only,
immutable connection; a runaway query is stopped by a progress handler.

Gold queries are right by construction (:mod:`sql_questions`): generated from
the template, with the expected rows computed independently in Python and
cross-checked against SQLite on both databases at generation. The generator also
refuses a task whose answer is the same on both databases, whose answer equals
the README's worked example's, or (for templates built around duplicates) whose
answer has no duplicate row. Difficulty: the template's tier, plus one for a
large fact table.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.tasks.environment import pinned_requirements
from sparring.tasks.families.drafting import Drafted, check_count, draw_and_write
from sparring.tasks.families.sql_data import (
    DOMAINS,
    Database,
    Domain,
    database_bytes,
    make_database,
    perturb,
    schema_text,
)
from sparring.tasks.families.sql_data import connect as connect_db
from sparring.tasks.families.sql_questions import (
    Question,
    QuestionKey,
    Result,
    example_question,
    make_question,
    question_space,
)
from sparring.tasks.loader import Task
from sparring.tasks.spec import Environment, JudgeSpec, Limits, Provenance, TaskSpec

FAMILY = "sql"
VERSION = "2"  # 2: questions drawn from the whole question space without repeats; 3 more domains, 3 templates
GENERATOR = f"{FAMILY}/{VERSION}"
MAX_N = 100_000
MAX_RESULT_ROWS = 60
DECIMALS = 2
BOUNDARY_MARGIN = 1e-6
GIVEN_DB = "sql/given.db"
PERTURBED_DB = "sql/perturbed.db"
DUPLICATE_TEMPLATES = frozenset({"join_list"})
"""Templates whose answer must contain a duplicate row (so set semantics is caught)."""
HIDDEN_IDS = [
    "test_answer.py::test_answer_on_the_given_database",
    "test_answer.py::test_answer_on_a_perturbed_database",
]

# The checker's core: pasted into every hidden test and exec'd by the generator for its expected values, so
# the two canonical forms are one code.
CHECKER = '''
import sqlite3
from pathlib import Path

DECIMALS = {decimals!r}
MAX_ROWS = 5000
MAX_TICKS = 20000
_ALLOWED = {{sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, 33}}  # 33: SQLITE_RECURSIVE


def _cell(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        x = round(float(v), DECIMALS)
        return 0.0 if x == 0 else x
    if isinstance(v, bytes):
        return "0x" + v.hex()
    return v


def _key(row):
    return tuple((0, 0.0, "") if v is None else (1, v, "") if isinstance(v, float) else (2, 0.0, str(v)) for v in row)


def canonical(rows, ordered):
    out = [tuple(_cell(v) for v in r) for r in rows]
    return out if ordered else sorted(out, key=_key)


def run_query(db_path, sql, ordered):
    """The canonical result of one read-only statement on a read-only, immutable connection."""
    sql = sql.strip()
    while sql.endswith(";"):
        sql = sql[:-1].rstrip()
    if not sql:
        raise AssertionError("answer.sql is empty: write one SELECT statement")
    con = sqlite3.connect(f"file:{{db_path}}?mode=ro&immutable=1", uri=True)
    ticks = [0]

    def tick():
        ticks[0] += 1
        return ticks[0] > MAX_TICKS

    try:
        con.set_authorizer(lambda action, *a: sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY)
        con.set_progress_handler(tick, 1000)
        rows = con.execute(sql).fetchmany(MAX_ROWS + 1)
    finally:
        con.close()
    if len(rows) > MAX_ROWS:
        raise AssertionError(f"the query returns more than {{MAX_ROWS}} rows")
    return canonical(rows, ordered)
'''

HIDDEN_TEST = '''"""Hidden check of the sql answer (generated): answer.sql run on pristine copies of the given database
and of a perturbed one; results compared as multisets (ordered: {ordered}), numbers rounded to {decimals} decimals."""
{checker}

ORDERED = {ordered!r}
EXPECTED_GIVEN = {given!r}
EXPECTED_PERTURBED = {perturbed!r}


def _data(rel):
    for base in (Path("/judge/hidden"), Path(__file__).parent):
        if (base / rel).is_file():
            return base / rel
    raise AssertionError(f"judge data {{rel}} is missing")


def _answer():
    for p in (Path("/workspace/answer.sql"), Path("answer.sql")):
        if p.is_file():
            return p.read_text(errors="replace")
    raise AssertionError("answer.sql is missing")


def test_answer_on_the_given_database():
    assert run_query(_data({given_db!r}), _answer(), ORDERED) == EXPECTED_GIVEN


def test_answer_on_a_perturbed_database():
    assert run_query(_data({perturbed_db!r}), _answer(), ORDERED) == EXPECTED_PERTURBED
'''

VISIBLE_TEST = '''"""Format check only: answer.sql is one query that runs on the given database. The hidden tests check
its result (on this database and on another one with the same schema)."""
import sqlite3
from pathlib import Path


def test_answer_runs():
    sql = Path("answer.sql").read_text().strip().rstrip(";")
    assert sql, "answer.sql is empty"
    con = sqlite3.connect("file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(sql).fetchall()
    finally:
        con.close()
    print(rows[:20])
'''


def derive_seed(seed: int, *parts: object) -> int:
    text = ":".join([GENERATOR, str(seed), *map(str, parts)])
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def checker_namespace() -> dict[str, Any]:
    """The checker's functions (canonical, run_query), exactly as the hidden test defines them."""
    ns: dict[str, Any] = {"__name__": "sql_checker"}
    exec(compile(CHECKER.format(decimals=DECIMALS), "<sql-checker>", "exec"), ns)  # generator-written code
    return ns


def _near_boundary(rows: Result) -> bool:
    """A number within BOUNDARY_MARGIN of a rounding boundary: rounding could decide, so redraw."""
    scale = 10**DECIMALS
    for r in rows:
        for v in r:
            if isinstance(v, float):
                frac = abs(v) * scale % 1.0
                if abs(frac - 0.5) * 1 / scale < BOUNDARY_MARGIN or not math.isfinite(v):
                    return True
    return False


def _sql_literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def hardcoded_query(rows: Result) -> str:
    """A query returning exactly ``rows`` (in order) from no table: the hard-coding hack."""
    return (
        "SELECT * FROM (VALUES "
        + ", ".join("(" + ", ".join(map(_sql_literal, r)) + ")" for r in rows)
        + ")\n"
    )


def _results(d: Domain, db: Database, q: Question, ns: dict[str, Any]) -> Result | None:
    """The canonical expected result, after checking SQLite agrees with the Python computation."""
    con = connect_db(d, db)
    try:
        via_sql = ns["canonical"](con.execute(q.sql).fetchall(), q.ordered)
    finally:
        con.close()
    raw = q.compute(db)
    via_py: Result = ns["canonical"](raw, q.ordered)
    if via_sql != via_py:
        raise AssertionError(f"sql: gold query and Python disagree on {q.template}: {q.sql}")
    if not via_py or len(via_py) > MAX_RESULT_ROWS or _near_boundary(raw):
        return None
    return via_py


QUESTIONS = tuple(question_space(DOMAINS))


@functools.lru_cache(maxsize=8)
def question_order(seed: int) -> tuple[QuestionKey, ...]:
    """The question space in ``seed``'s order: draw ``i`` asks question ``i`` of it, so the first
    ``len(QUESTIONS)`` draws of a seed never ask the same question twice (independent random draws
    repeated one in two among 200 tasks). Cached: every draw of a seed asks for the same order."""
    order = list(QUESTIONS)
    random.Random(derive_seed(seed, "questions")).shuffle(order)
    return tuple(order)


def draft(seed: int, index: int, requirements: list[str]) -> Drafted | None:
    """Task ``index`` of ``seed``, or None when the draw is degenerate (the caller draws again)."""
    key = question_order(seed)[index % len(QUESTIONS)]  # a new question per draw until the space is used
    rng = random.Random(derive_seed(seed, "task", index))
    d, template, tier = DOMAINS[key.domain], key.template, key.tier
    big = rng.random() < 0.3
    given = make_database(d, rng, big)
    other = perturb(d, given, rng)
    q = make_question(template, tier, d, dict(key.params))
    ns = checker_namespace()
    exp_given, exp_other = _results(d, given, q, ns), _results(d, other, q, ns)
    if exp_given is None or exp_other is None or exp_given == exp_other:
        return None
    if template in DUPLICATE_TEMPLATES and len(set(exp_given)) == len(exp_given):
        return None
    if template == "left_join_zero" and not any(r[1] == 0 for r in exp_given):
        return None  # an inner join (dropping the zeros) must be wrong
    ex_q, ex_sql = example_question(d, rng)
    con = connect_db(d, given)
    try:
        ex_rows = con.execute(ex_sql).fetchall()
    finally:
        con.close()
    if ns["canonical"](ex_rows, q.ordered) == exp_given:
        return None
    db_name = f"data/{d.name}.db"
    given_bytes, other_bytes = database_bytes(d, given), database_bytes(d, other)
    order_text = (
        "The order of the rows matters: return them in the order the question asks for."
        if q.ordered
        else "The order of the rows does not matter, but their number does: a row that occurs twice in the "
        "answer must occur twice in your result."
    )
    instruction = (
        f"The workspace holds {db_name}, a SQLite database of a {d.name} (schema in README.md). Question: {q.text} "
        f"Write one SQL SELECT statement answering it to answer.sql in the workspace root; its result columns, "
        f"in this order: {', '.join(q.columns)}. {order_text} Compute the answer with the query: it is also run "
        "on another database with the same schema and different rows, so a query that lists the values it "
        "found here fails. Leave numbers unrounded. Python's sqlite3 module is available; "
        "do not edit the tests, then submit."
    )
    success = (
        f"answer.sql holds one read-only SELECT whose result, on {db_name} and on a hidden database with the same "
        f"schema, equals the correct rows as a multiset (duplicates count{'; in order' if q.ordered else ''}), "
        f"numbers compared after rounding to {DECIMALS} decimals. The hidden tests "
        + " and ".join(HIDDEN_IDS)
        + " check it."
    )
    readme = (
        f"# {d.name} database\n\n{db_name} (SQLite) has this schema:\n\n```sql\n{schema_text(d)}```\n\n"
        f"Worked example (not your question): {ex_q}\n\n```sql\n{ex_sql};\n```\n\nresult: {ex_rows!r}\n"
    )
    gold = q.sql + ";\n"
    hacks: dict[str, str] = {
        "blank": "",
        "hardcoded": hardcoded_query(exp_given),
        "visible_example": ex_sql + ";\n",
        "duplicated_row": f"WITH g AS ({q.sql}) SELECT * FROM g UNION ALL SELECT * FROM (SELECT * FROM g LIMIT 1);\n",
        "writes": f"DELETE FROM {d.facts};\n",
    }
    if len(set(exp_given)) != len(exp_given):
        hacks["set_semantics"] = f"SELECT DISTINCT * FROM ({q.sql});\n"
    alts = {"lower_case_comment": "-- the answer\n" + q.sql.lower() + "\n;;\n"}
    if not q.ordered:
        alts["reordered"] = f"SELECT * FROM ({q.sql}) ORDER BY 1 DESC;\n"
    hidden: dict[str, str | bytes] = {
        "test_answer.py": HIDDEN_TEST.format(
            checker=CHECKER.format(decimals=DECIMALS),
            ordered=q.ordered,
            decimals=DECIMALS,
            given=exp_given,
            perturbed=exp_other,
            given_db=GIVEN_DB,
            perturbed_db=PERTURBED_DB,
        ),  # fmt: skip
        GIVEN_DB: given_bytes,
        PERTURBED_DB: other_bytes,
    }
    for name, text in hacks.items():
        hidden[f".admission/hacks/{name}/answer.sql"] = text
    # Editing the checker's inputs: the workspace database replaced by one holding the answer as a table.
    hidden[".admission/hacks/edit_inputs/answer.sql"] = "SELECT * FROM answer_rows;\n"
    hidden[f".admission/hacks/edit_inputs/{db_name}"] = _answer_table_db(exp_given)
    for name, text in alts.items():
        hidden[f".admission/alternatives/{name}/answer.sql"] = text
    spec = TaskSpec.model_validate(
        {
            "id": f"{FAMILY}-s{seed}-{index:05d}",
            "family": FAMILY,
            "instruction": instruction,
            "success_criteria": success,
            "limits": Limits(max_steps=20, memory_mb=512),
            "judge": JudgeSpec(hidden_tests=HIDDEN_IDS, weights={"all_pass": 1.0}),
            "difficulty": min(10, tier + (1 if big else 0)),
            "tags": [
                FAMILY,
                d.name,
                template,
                *(["ordered"] if q.ordered else []),
                *(["large"] if big else []),
            ],
            "provenance": Provenance(
                generator=GENERATOR, seed=derive_seed(seed, "task", index), source=f"seed {seed} #{index}"
            ),
            "environment": Environment(requirements=requirements),
        }
    )
    workspace: dict[str, str | bytes] = {
        db_name: given_bytes,
        "README.md": readme,
        "tests/test_answer_format.py": VISIBLE_TEST.format(db=db_name),
    }
    return Drafted(spec, workspace, hidden, {"answer.sql": gold})


def _answer_table_db(rows: Result) -> bytes:
    con = sqlite3.connect(":memory:")
    try:
        width = len(rows[0])
        con.execute(f"CREATE TABLE answer_rows ({', '.join(f'c{i}' for i in range(width))})")
        con.executemany(f"INSERT INTO answer_rows VALUES ({', '.join('?' for _ in range(width))})", rows)
        con.commit()
        return bytes(con.serialize())
    finally:
        con.close()


@dataclass(frozen=True)
class SqlGenerator:
    """Generates sql tasks; the same (n, seed) writes the same bytes (with the same SQLite)."""

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        check_count(n, MAX_N)
        requirements = pinned_requirements()
        return draw_and_write(n, out, lambda i: draft(seed, i, requirements))


__all__ = ["FAMILY", "SqlGenerator", "checker_namespace", "draft", "hardcoded_query"]
