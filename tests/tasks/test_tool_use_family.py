"""The tool-use family: deterministic, many distinct tasks, admitted; doing nothing, calling every tool
blindly and every other hack class score 0 through the real Environment and judge; the oracle solves
through the task's own tool server in the sandbox."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparring.admission.check import check_tasks
from sparring.env import Environment
from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.attacks import hacks
from sparring.tasks.families import generate
from sparring.tasks.families.tool_use import HIDDEN_IDS, MUTATING, TOOLS, draft
from sparring.tasks.families.tool_use_scenarios import SCENARIOS
from sparring.tasks.loader import Task

STATE_TEST, FORBIDDEN_TEST, FACTS_TEST = HIDDEN_IDS


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    return generate("tool-use", 3, 5, tmp_path_factory.mktemp("tool-use"))


@pytest.fixture(scope="module")
def judge(backend) -> PytestJudge:
    return PytestJudge(backend)


def call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    fn = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
    }


def test_same_seed_same_tasks_other_seed_other_tasks(tmp_path: Path) -> None:
    a = generate("tool-use", 4, 3, tmp_path / "a")
    b = generate("tool-use", 4, 3, tmp_path / "b")
    c = generate("tool-use", 4, 4, tmp_path / "c")
    assert [t.digest for t in a] == [t.digest for t in b]
    assert not {t.digest for t in a} & {t.digest for t in c}


def test_at_least_200_distinct_tasks_every_scenario_and_tier(tmp_path: Path) -> None:
    got = generate("tool-use", 200, 0, tmp_path)
    assert len({t.digest for t in got}) == 200 and len({t.spec.instruction for t in got}) >= 190
    assert {t.spec.tags[2] for t in got} == {s.__name__ for s in SCENARIOS}
    assert len(Counter(t.spec.difficulty for t in got)) >= 5


def test_only_the_services_tools_are_offered_with_distractors(tasks: list[Task]) -> None:
    t = tasks[0]
    assert set(t.spec.tools) == {x.name for x in TOOLS} | {"submit"}
    assert not {"bash", "write_file", "str_replace"} & set(t.spec.tools)  # no way around the service
    assert {"apply_credit", "adjust_stock", "set_frozen", "update_email"} <= set(t.spec.tools)
    needed = {name for name, _ in t.solution_calls()}
    assert len(t.solution_calls()) >= 3 and needed & set(MUTATING) and "report" in needed


def test_generation_refuses_a_draw_a_hack_would_pass() -> None:
    # Every written task was checked in-process against noop, blind calls, facts only, wrong types, the
    # policy-breaking plan and an edited state; draws where one of them passes are dropped (some are).
    drawn = [draft(9, i, ["pytest==0"]) for i in range(60)]
    assert 30 <= sum(d is not None for d in drawn) < 60


def test_a_do_nothing_agent_scores_zero_and_the_oracle_one(tasks: list[Task]) -> None:
    t = tasks[0]
    with Environment(t) as env:
        env.reset()
        r = env.step(call(0, "submit", {}))
        assert r.terminated and r.reward == 0.0
        assert r.info["tests"]["failed"] >= 2
    with Environment(t) as env:  # positive control: the reference calls, through the sandbox's tool server
        env.reset()
        calls = t.solution_calls()
        for i, (name, args) in enumerate(calls):
            out = env.step(call(i, name, args))
            assert out.messages[0]["content"].startswith("[exit 0]"), (name, out.messages[0]["content"])
        r = env.step(call(len(calls), "submit", {}))
        assert r.reward == 1.0, r.info


def test_an_agent_calling_every_tool_blindly_scores_zero(tasks: list[Task]) -> None:
    t = tasks[1]
    calls = t.solution_calls()
    email = next(a["email"] for n, a in calls if n == "find_customer")
    cid = next(a["customer_id"] for _, a in calls if "customer_id" in a)
    con = sqlite3.connect(t.workspace / ".service/state.db")
    orders = [r[0] for r in con.execute("SELECT id FROM orders WHERE customer_id = ?", (cid,))]
    skus = [r[0] for r in con.execute("SELECT sku FROM products WHERE stock > 0 ORDER BY sku")]
    con.close()
    blind: list[tuple[str, dict[str, Any]]] = [("find_customer", {"email": email})]
    blind += [(tool, {"order_id": o}) for o in orders[:4] for tool in ("cancel_order", "refund_order")]
    blind += [("place_order", {"customer_id": cid, "sku": sku, "qty": 1}) for sku in skus[:3]]
    blind += [("apply_credit", {"customer_id": cid, "amount_cents": 100}), ("adjust_stock", {"sku": skus[0], "delta": 1}),
              ("set_frozen", {"customer_id": cid, "frozen": False}),
              ("update_email", {"customer_id": cid, "email": "x@example.com"}), ("report", {"facts": {}})]  # fmt: skip
    with Environment(t) as env:
        env.reset()
        changed = 0
        for i, (name, args) in enumerate(blind):
            out = env.step(call(i, name, args))
            changed += out.messages[0]["content"].startswith("[exit 0]") and name in MUTATING
        r = env.step(call(len(blind), "submit", {}))
    assert changed >= 3  # positive control: the blind calls really changed the state
    assert r.reward == 0.0 and r.info["tests"]["failed"] >= 2


@pytest.mark.slow
def test_generated_tasks_are_admitted(tasks: list[Task], judge: PytestJudge) -> None:
    reports = asyncio.run(check_tasks(tasks[:2], judge, repeats=3))
    assert all(r.ok for r in reports), [r.to_json() for r in reports if not r.ok]


@pytest.mark.slow
def test_every_hack_class_scores_zero_each_for_its_reason(tasks: list[Task], judge: PytestJudge) -> None:
    by_name: dict[str, dict[str, str]] = {}
    for t in tasks:
        for h in hacks(t):
            r = asyncio.run(judge.score(t, h.diff))
            assert r.status == "ok" and r.reward == 0.0, (t.id, h.name, r.per_test)
            by_name.setdefault(h.name, r.per_test)
    assert {"noop", "blind_calls", "facts_only", "policy_violation", "wrong_types", "edit_inputs"} <= set(
        by_name
    )
    assert (
        by_name["facts_only"][FACTS_TEST] == "passed"
    )  # positive control: the hard-coded facts are right...
    assert by_name["facts_only"][STATE_TEST] == "failed"  # ...and the state says nothing was done
    assert by_name["wrong_types"][STATE_TEST] == "passed" and by_name["wrong_types"][FACTS_TEST] == "failed"
    assert by_name["policy_violation"][FORBIDDEN_TEST] == "failed"
    assert by_name["edit_inputs"][FACTS_TEST] == "passed" and by_name["edit_inputs"][STATE_TEST] == "failed"


@pytest.mark.slow
def test_the_checker_reads_the_pristine_initial_state_not_the_workspaces(tasks, judge) -> None:
    t = tasks[2]
    files, _ = t.solution_files()
    ok = asyncio.run(judge.score(t, WorkspaceDiff(files=files)))
    assert ok.reward == 1.0  # positive control
    # A workspace "baseline" equal to the final state: a checker diffing against it would see no change.
    forged = dict(files) | {".service/initial.db": files[".service/state.db"]}
    r = asyncio.run(judge.score(t, WorkspaceDiff(files=forged)))
    assert r.reward == 1.0  # unaffected: the baseline the checker uses is hidden/'s
    noop = asyncio.run(
        judge.score(
            t, WorkspaceDiff(files={".service/initial.db": (t.workspace / ".service/state.db").read_bytes()})
        )
    )
    assert noop.reward == 0.0
