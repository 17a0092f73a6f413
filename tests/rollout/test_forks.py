"""Forked rollouts: real sandboxes snapshotted at branch points, K branches played, judged and stored as a tree."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparring.env.environment import Mark
from sparring.errors import ConfigError
from sparring.judge.pytest_judge import PytestJudge
from sparring.monitor.trajpages import write_site
from sparring.policy.scripted import ScriptPolicy
from sparring.rollout.branching import (
    BranchPlan,
    BranchPoint,
    branch_id,
    branch_seed,
    parse_branch_plan,
    process_state_reason,
    select_points,
    turn_surprisal,
)
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import write_task
from sparring.tasks.spec import Limits, TaskSpec
from sparring.trajectory import TokenTrace

EXE = Path(sys.executable).parent / "sparring"
CORE = "mathx/core.py"
FIX = (
    "str_replace",
    {"path": CORE, "old": "        return lo\n    return x", "new": "        return hi\n    return x"},
    "",
)
PREFIX = [
    ("bash", {"command": "echo root > /tmp/note && echo home > ~/note"}, ""),
    ("bash", {"command": "cat /tmp/note ~/note > seen.txt"}, ""),
]
SOLVE = [*PREFIX, ("read_file", {"path": CORE}, ""), FIX, ("run_tests", {}, ""), ("submit", {}, "")]
GIVE_UP = [*PREFIX, ("submit", {}, "")]
SCRIPTS = [SOLVE, GIVE_UP]  # script = (sample_index + seed) % 2: the root (0, 0) solves


def _run(backend, store, task, plan, run_id="forks", resume=True):
    async def go():
        pool = SandboxPool(backend, max_idle=2)
        try:
            sched = RolloutScheduler(pool, PytestJudge(backend), store, concurrency=2, branch=plan)
            return await sched.run([task], ScriptPolicy(SCRIPTS), 1, run_id=run_id, resume=resume)
        finally:
            await pool.close()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def forked(backend, clamp_task, tmp_path_factory):
    path = tmp_path_factory.mktemp("forks") / "s.db"
    store = SQLiteStore(path)
    summary = _run(backend, store, clamp_task, BranchPlan(2, turns=frozenset({1, 2})))
    yield summary, store, path
    store.close()


@pytest.mark.slow
def test_branches_fork_at_the_given_turns_and_carry_workspace_tmp_and_home(forked):
    summary, store, _ = forked
    assert summary.requested == summary.stored == 1 and summary.statuses == {"ok": 1}
    assert summary.branches == {"ok": 4}
    root = next(t for t in summary.trajectories if t.parent_id is None)
    assert root.branch_turn is None and root.reward == 1.0
    kids = store.children(root.id)
    assert sorted((k.branch_turn, k.id) for k in kids) == sorted(
        (turn, branch_id(root.id, turn, k)) for turn in (1, 2) for k in range(2)
    )
    for kid in kids:
        assert kid.parent_id == root.id and kid.status == "ok" and kid.group_id == root.group_id
        n = kid.branch_turn
        # the shared prefix is the root's, turn for turn; the branch goes on from there
        shared = [m for m in root.messages if m["role"] == "assistant"][:n]
        assert [m for m in kid.messages if m["role"] == "assistant"][:n] == shared
        assert [s.name for s in kid.steps[:n]] == [s.name for s in root.steps[:n]]
        # /tmp and the home directory came along: the branch forked at turn 1 ran `cat` itself
        assert kid.diff["files"]["seen.txt"]["text"] == "root\nhome\n"
        solves = SCRIPTS[(kid.sample_index + branch_seed(0, n, _k(kid, root))) % 2] is SOLVE
        assert kid.reward == (1.0 if solves else 0.0), (n, kid.reward)


def _k(kid, root) -> int:
    return next(k for k in range(2) if branch_id(root.id, kid.branch_turn, k) == kid.id)


@pytest.mark.slow
def test_traj_show_json_and_the_viewer_show_the_tree(forked, tmp_path):
    summary, store, path = forked
    root = next(t for t in summary.trajectories if t.parent_id is None)
    kid = store.children(root.id)[0]
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"}
    for t, parent, turn in ((root, None, None), (kid, root.id, kid.branch_turn)):
        r = subprocess.run([str(EXE), "traj", "show", t.id, "--json", "--store", str(path)], capture_output=True,
                           text=True, timeout=120, env=env)  # fmt: skip
        doc = json.loads(r.stdout)
        assert r.returncode == 0 and doc["parent_id"] == parent and doc["branch_turn"] == turn
    site = write_site(summary.trajectories, tmp_path / "site")
    root_page = next(p for p in site["pages"] if root.id in p)
    html = Path(root_page).read_text()
    assert "4 branch(es) forked" in html and all(k.id[:12] in html for k in store.children(root.id))
    kid_html = Path(next(p for p in site["pages"] if kid.id in p)).read_text()
    assert (
        f"forked from <a href='../t/{root.id}.html'>" in kid_html
        and f"after turn {kid.branch_turn}" in kid_html
    )


@pytest.mark.slow
def test_a_resumed_run_does_not_duplicate_branches(forked, backend, clamp_task):
    summary, store, _ = forked
    before = store.count()
    again = _run(backend, store, clamp_task, BranchPlan(2, turns=frozenset({1, 2})), resume=True)
    assert again.resumed == 1 and store.count() == before == 5


def test_branch_plans_parse_and_bad_ones_are_one_line_errors():
    assert parse_branch_plan("1,2", 3) == BranchPlan(3, turns=frozenset({1, 2}))
    assert parse_branch_plan("first:2", 1) == BranchPlan(1, first=2)
    assert parse_branch_plan("all", 2).forks_at(7)  # type: ignore[union-attr]
    assert parse_branch_plan("entropy:2", 3) == BranchPlan(3, entropy=2)
    assert parse_branch_plan("entropy:2", 3).forks_at(9)  # type: ignore[union-attr]  # every turn a candidate
    assert BranchPlan(3, entropy=2).to_json() == {"branch_at": "entropy:2", "branches": 3}
    assert parse_branch_plan(None, 0) is None
    for at, k in (
        ("0", 2),
        ("x", 2),
        ("first:0", 1),
        ("entropy:0", 1),
        ("entropy:x", 1),
        ("1", 0),
        (None, 2),
    ):
        with pytest.raises(ConfigError):
            parse_branch_plan(at, k)


def test_tasks_whose_state_lives_in_a_process_are_refused(clamp_task, tmp_path):
    spec = TaskSpec.model_validate({**clamp_task.spec.model_dump(), "id": "served",
                                    "limits": Limits(network="loopback")})  # fmt: skip
    served = write_task(
        tmp_path / "tasks" / "served", spec, workspace={"a.py": "x = 1\n"}, hidden={}, solution={}
    )
    assert process_state_reason(served) is not None and process_state_reason(clamp_task) is None
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"}
    r = subprocess.run([str(EXE), "rollout", "--tasks", str(served.path), "--policy", "oracle", "--store",
                        str(tmp_path / "s.db"), "--branch-at", "1", "--branches", "2"],
                       capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert (
        r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error:") and "cannot fork" in lines[0]
    )
    assert not (tmp_path / "s.db").exists()


def _point(turn: int, before: int) -> BranchPoint:
    return BranchPoint(turn, Mark("snap", turn, 0, 0, 0), b"", before)


@given(
    st.lists(st.one_of(st.none(), st.lists(st.floats(-20, 0), max_size=5)), max_size=8),
    st.integers(1, 4),
)
def test_entropy_keeps_the_n_points_whose_next_turn_was_least_sure(logprobs, n):
    traces = [TokenTrace(prompt_ids=[1], completion_ids=[2] * len(lp or ()), logprobs=lp) for lp in logprobs]
    points = [_point(t, t) for t in range(1, len(traces) + 2)]  # after turn t, the next turn is traces[t]
    chosen = select_points(BranchPlan(2, entropy=n), points, traces)
    score = {p.turn: turn_surprisal(traces[p.traces_before]) if p.traces_before < len(traces) else None
             for p in points}  # fmt: skip
    scored = [t for t, v in score.items() if v is not None]
    assert [p.turn for p in chosen] == sorted(p.turn for p in chosen)
    assert len(chosen) == min(n, len(scored)) and all(score[p.turn] is not None for p in chosen)
    worst_kept = min((score[p.turn] for p in chosen), default=None)
    dropped = [score[t] for t in scored if t not in {p.turn for p in chosen}]
    assert worst_kept is None or all(d <= worst_kept for d in dropped)  # type: ignore[operator]
    assert select_points(BranchPlan(2, turns=frozenset({1})), points, traces) == points  # other plans: all


class SureExceptAtTheFix:
    """The fork tests' scripts, each turn's action given token logprobs (the real thing is an ``hf:``
    policy; these say exactly where the policy was unsure: the fix, turn 4)."""

    version = 0

    def __init__(self) -> None:
        self.inner = ScriptPolicy(SCRIPTS)
        self.name = "script+logprobs"

    async def act(self, request):  # type: ignore[no-untyped-def]
        action = await self.inner.act(request)
        turn = sum(1 for m in request.messages if m.get("role") == "assistant") + 1
        lp = [-4.0, -3.0] if turn == 4 else [-0.1, -0.2]
        return dataclasses.replace(
            action, trace=TokenTrace(prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=lp)
        )

    async def close(self) -> None:
        return None


@pytest.mark.slow
def test_entropy_branch_points_fork_where_the_policy_was_least_sure(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")

    async def go():
        pool = SandboxPool(backend, max_idle=2)
        try:
            sched = RolloutScheduler(
                pool, PytestJudge(backend), store, concurrency=2, branch=BranchPlan(2, entropy=1)
            )
            return await sched.run([clamp_task], SureExceptAtTheFix(), 1, run_id="entropy")
        finally:
            await pool.close()

    asyncio.run(go())
    total, page = store.search(TrajQuery(limit=10))
    roots = [t for t in page if t.parent_id is None]
    kids = [t for t in page if t.parent_id is not None]
    assert total == 3 and len(roots) == 1 and len(kids) == 2
    assert {t.branch_turn for t in kids} == {3}  # after turn 3: the next turn (the fix) was the unsure one
    store.close()
