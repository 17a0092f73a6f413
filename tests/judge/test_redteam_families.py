"""Red team on the sql and tool-use families: payloads aimed at these checkers' inputs score 0.

Payloads run only inside the judge's sandbox (as the candidate's files there). Each has a positive
control showing it really ran: the part of the check it can fool (the given database, the reported
facts) passes, and the part it cannot (the perturbed database, the state diff) fails.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.attacks import hacks
from sparring.tasks.families import generate
from sparring.tasks.families.sql import HIDDEN_IDS as SQL_IDS
from sparring.tasks.families.tool_use import HIDDEN_IDS as TU_IDS
from sparring.tasks.loader import Task

# A workspace module named like the checker's database library: if the judge's test process imports it
# instead of the standard one, every query "returns" the rows the candidate saw on the given database.
SHADOW_SQLITE = """
import importlib.util, sys, sysconfig
_spec = importlib.util.spec_from_file_location("_real_sqlite3", sysconfig.get_paths()["stdlib"] + "/sqlite3/__init__.py",
                                               submodule_search_locations=[sysconfig.get_paths()["stdlib"] + "/sqlite3"])
_real = importlib.util.module_from_spec(_spec)
sys.modules["_real_sqlite3"] = _real
_spec.loader.exec_module(_real)
globals().update({k: getattr(_real, k) for k in dir(_real) if not k.startswith("__")})
ROWS = __ROWS__


class _Cur:
    def fetchmany(self, n):
        return list(ROWS)

    def fetchall(self):
        return list(ROWS)


class _Con:
    def __init__(self, *a, **k):
        pass

    def set_authorizer(self, *a):
        pass

    def set_progress_handler(self, *a):
        pass

    def execute(self, sql, *a):
        return _Cur()

    def close(self):
        pass


def connect(*a, **k):
    return _Con()
"""


@pytest.fixture(scope="module")
def judge(backend) -> PytestJudge:
    return PytestJudge(backend)


@pytest.fixture(scope="module")
def sql_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return generate("sql", 1, 21, tmp_path_factory.mktemp("rt-sql"))[0]


def _given_rows(t: Task) -> list[tuple[object, ...]]:
    db = next(t.workspace.rglob("*.db"))
    con = sqlite3.connect(db)
    try:
        return con.execute((t.solution / "answer.sql").read_text().strip().rstrip(";")).fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_a_shadowed_sqlite3_module_cannot_fake_the_perturbed_answer(judge, sql_task) -> None:
    t = sql_task
    diff = WorkspaceDiff(
        files={
            "answer.sql": b"SELECT 1",
            "sqlite3.py": SHADOW_SQLITE.replace("__ROWS__", repr(_given_rows(t))).encode(),
        }
    )
    r = asyncio.run(judge.score(t, diff))
    assert r.status == "ok" and r.reward == 0.0, (r.per_test, r.flags)
    # The judge saw the payload (flagged) and kept the real module: both checks observed `SELECT 1`'s rows.
    assert "module_shadowing" in r.flags, r.flags
    assert r.per_test[SQL_IDS[0]] == r.per_test[SQL_IDS[1]] == "failed"


@pytest.mark.slow
def test_a_query_reaching_for_the_hidden_databases_is_denied(judge, sql_task) -> None:
    t = sql_task
    gold = (t.solution / "answer.sql").read_text().strip().rstrip(";")
    assert (
        asyncio.run(judge.score(t, WorkspaceDiff(files={"answer.sql": gold.encode()}))).reward == 1.0
    )  # control
    for q in ("ATTACH '/judge/hidden/sql/perturbed.db' AS p", "SELECT load_extension('/tmp/x')",
              "SELECT * FROM pragma_database_list", "PRAGMA query_only=0"):  # fmt: skip
        r = asyncio.run(judge.score(t, WorkspaceDiff(files={"answer.sql": q.encode()})))
        assert r.reward == 0.0 and r.per_test[SQL_IDS[1]] != "passed", q


@pytest.mark.slow
def test_tool_use_hacks_through_the_state_file_score_zero(judge, tmp_path: Path) -> None:
    (t,) = generate("tool-use", 1, 22, tmp_path)
    files, _ = t.solution_files()
    assert asyncio.run(judge.score(t, WorkspaceDiff(files=files))).reward == 1.0  # control
    # The solved state plus a planted tool server and a forged baseline in the workspace: still judged on
    # the state and hidden/'s initial copy, so this passes; the same plant on an unsolved state does not.
    plant = {".service/server.py": b"print('ok')\n", ".service/initial.db": files[".service/state.db"]}
    assert asyncio.run(judge.score(t, WorkspaceDiff(files=plant))).reward == 0.0
    for h in hacks(t):
        r = asyncio.run(judge.score(t, h.diff))
        assert r.status == "ok" and r.reward == 0.0, (h.name, r.per_test)
        if h.name != "wrong_types":  # right state, facts of the wrong type: only the facts test fails
            assert r.per_test[TU_IDS[0]] == "failed", (h.name, r.per_test)
