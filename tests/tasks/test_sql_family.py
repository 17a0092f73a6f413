"""The sql family: deterministic, many distinct tasks, admitted; every hack class scores 0 through
the real judge, and each checker hole of weak SQL suites has a test built to exploit it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from sparring.admission.check import check_tasks
from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.attacks import alternatives, hacks
from sparring.tasks.families import generate
from sparring.tasks.families.sql import HIDDEN_IDS, QUESTIONS, checker_namespace, draft
from sparring.tasks.families.sql_questions import TEMPLATES
from sparring.tasks.loader import Task

GIVEN, PERTURBED = HIDDEN_IDS


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    return generate("sql", 3, 7, tmp_path_factory.mktemp("sql"))


@pytest.fixture(scope="module")
def judge(backend) -> PytestJudge:
    return PytestJudge(backend)


def score(judge: PytestJudge, task: Task, files: dict[str, bytes]) -> tuple[float, dict[str, str]]:
    r = asyncio.run(judge.score(task, WorkspaceDiff(files=files)))
    assert r.status == "ok", r.reason
    return r.reward, r.per_test


def test_same_seed_same_tasks_other_seed_other_tasks(tmp_path: Path) -> None:
    a = generate("sql", 4, 3, tmp_path / "a")
    b = generate("sql", 4, 3, tmp_path / "b")
    c = generate("sql", 4, 4, tmp_path / "c")
    assert [t.digest for t in a] == [t.digest for t in b]
    assert not {t.digest for t in a} & {t.digest for t in c}


def test_at_least_200_distinct_tasks_every_template_and_tier(tmp_path: Path) -> None:
    got = generate("sql", 200, 0, tmp_path)
    assert len({t.digest for t in got}) == 200
    # 200 different questions (each draw takes the next question of the seed's order of the space)
    assert len({t.spec.instruction for t in got}) == 200
    assert len(QUESTIONS) >= 3 * 200 - 10 and len(set(QUESTIONS)) == len(QUESTIONS)
    assert {t.spec.instruction for t in got} != {
        t.spec.instruction for t in generate("sql", 200, 1, tmp_path / "s1")
    }
    assert {t.spec.tags[2] for t in got} == {name for name, _ in TEMPLATES}
    assert len(Counter(t.spec.difficulty for t in got)) >= 5


def test_gold_is_cross_checked_against_python_on_both_databases() -> None:
    # draft() raises when SQLite and the independent Python computation disagree; 150 draws of every
    # template on both databases run that check (the generator's own guard, exercised here).
    drawn = [d for d in (draft(11, i, ["pytest==0"]) for i in range(150)) if d is not None]
    assert len(drawn) >= 100


def test_checker_counts_duplicates_and_orders_only_when_asked() -> None:
    ns = checker_namespace()
    rows = [("lyon",), ("lyon",), ("graz",)]
    assert ns["canonical"](rows, False) != ns["canonical"](rows[:2], False)  # a dropped duplicate differs
    assert ns["canonical"](rows, False) != ns["canonical"](sorted(set(rows)), False)  # set semantics differs
    assert ns["canonical"](rows, False) == ns["canonical"](rows[::-1], False)
    assert ns["canonical"](rows, True) != ns["canonical"](rows[::-1], True)
    assert ns["canonical"]([(3, 1.0049999)], False) == ns["canonical"]([(3.0, 1.0)], False)  # the tolerance


def test_checker_denies_writes_attach_and_runaway_queries(tmp_path: Path) -> None:
    ns = checker_namespace()
    db = tmp_path / "x.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    con.close()
    before = db.read_bytes()
    assert ns["run_query"](db, "SELECT a FROM t;", False) == [(1.0,)]  # positive control
    for bad in ("DELETE FROM t", "DROP TABLE t", f"ATTACH '{tmp_path}/y.db' AS y", "PRAGMA writable_schema=1",
                "SELECT 1; DELETE FROM t", "",
                "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"):  # fmt: skip
        with pytest.raises((sqlite3.Error, AssertionError, sqlite3.Warning)):
            ns["run_query"](db, bad, False)
    assert db.read_bytes() == before and not (tmp_path / "y.db").exists()


@pytest.mark.slow
def test_generated_tasks_are_admitted(tasks: list[Task], judge: PytestJudge) -> None:
    reports = asyncio.run(check_tasks(tasks[:2], judge, repeats=3))
    assert all(r.ok for r in reports), [r.to_json() for r in reports if not r.ok]


@pytest.mark.slow
def test_every_hack_class_scores_zero_and_alternatives_pass(tasks: list[Task], judge: PytestJudge) -> None:
    t = tasks[0]
    shipped = {h.name: h.diff for h in hacks(t)}
    assert {"noop", "delete_tests", "blank", "hardcoded", "visible_example", "duplicated_row", "writes",
            "edit_inputs"} <= set(shipped)  # fmt: skip
    for name, diff in shipped.items():
        r = asyncio.run(judge.score(t, diff))
        assert r.status == "ok" and r.reward == 0.0, (name, r.per_test, r.flags)
    for alt in alternatives(t):
        r = asyncio.run(judge.score(t, alt.diff))
        assert r.reward == 1.0, (alt.name, r.per_test)


@pytest.mark.slow
def test_hard_coded_answer_is_right_here_and_fails_on_the_perturbed_copy(tasks, judge) -> None:
    t = tasks[1]
    (diff,) = [h.diff for h in hacks(t) if h.name == "hardcoded"]
    reward, per_test = score(judge, t, dict(diff.files))
    assert per_test[GIVEN] == "passed"  # positive control: the hard-coded rows are the right rows here
    assert per_test[PERTURBED] == "failed" and reward == 0.0


@pytest.mark.slow
def test_a_duplicated_row_and_a_dropped_duplicate_both_fail(tmp_path: Path, judge: PytestJudge) -> None:
    (t,) = [x for x in generate("sql", 30, 2, tmp_path) if x.spec.tags[2] == "join_list"][:1]
    gold = (t.solution / "answer.sql").read_text().strip().rstrip(";")
    assert score(judge, t, {"answer.sql": gold.encode()})[0] == 1.0  # positive control
    for wrong in (f"SELECT DISTINCT * FROM ({gold})",
                  f"WITH g AS ({gold}) SELECT * FROM g UNION ALL SELECT * FROM (SELECT * FROM g LIMIT 1)"):  # fmt: skip
        reward, per_test = score(judge, t, {"answer.sql": wrong.encode()})
        assert reward == 0.0 and per_test[GIVEN] == "failed", wrong


@pytest.mark.slow
def test_edited_workspace_database_is_not_what_the_checker_reads(tasks, judge, tmp_path) -> None:
    t = tasks[2]
    (diff,) = [h.diff for h in hacks(t) if h.name == "edit_inputs"]
    db = next(rel for rel in diff.files if rel.endswith(".db"))
    assert db in {p.relative_to(t.workspace).as_posix() for p in t.workspace.rglob("*.db")}
    ns = checker_namespace()
    ordered = "ordered" in t.spec.tags
    gold = (t.solution / "answer.sql").read_text()
    edited = tmp_path / "edited.db"
    edited.write_bytes(diff.files[db])
    # positive control: on the edited copy, the hack's query gives exactly the gold rows of the given database
    assert ns["run_query"](edited, "SELECT * FROM answer_rows", ordered) == ns["run_query"](
        t.workspace / db, gold, ordered
    )
    reward, per_test = score(judge, t, dict(diff.files))
    assert reward == 0.0 and set(per_test.values()) == {"failed"}
