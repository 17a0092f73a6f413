"""The failure-case library: clustering by signature and promotion into tasks and regression cases."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.base import Action
from sparring.policy.scripted import OraclePolicy, tool_call_message
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.store.failures import cluster, error_type
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import load_task
from sparring.trajectory import Trajectory

EXE = Path(sys.executable).parent / "sparring"


def sp(*args):
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"}
    return subprocess.run([str(EXE), *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


def _t(i: int, **kw) -> Trajectory:
    f = dict(id=f"t{i}", task_id="a", task_digest="d" * 64, policy="p", status="infra_error", reward=None,
             created_at=1_700_000_000.0 + i)  # fmt: skip
    f.update(kw)
    return Trajectory(**f)


def test_error_types_mask_what_varies_between_occurrences():
    a = error_type("SandboxError: sandbox 3f2a9c1d0e broken at /tmp/sb/17/x after 4.5s (pid 991)")
    b = error_type("SandboxError: sandbox 91bc77aa12 broken at /tmp/sb/3/y after 12s (pid 12)")
    assert a == b and "SandboxError: sandbox" in a
    assert error_type("HTTP 500: 'model exploded'") == error_type("HTTP 502: 'gateway'")
    assert error_type(None) == ""


def test_clusters_group_by_signature_biggest_first_and_skip_passes():
    trajs = [
        _t(1, error="SandboxError: sandbox 3f2a9c1d0e died"),
        _t(2, error="SandboxError: sandbox 91bc77aa12 died"),
        _t(3, status="truncated", reward=0.0, failing_tests=["t.py::test_b", "t.py::test_a"]),
        _t(4, status="ok", reward=0.0, failing_tests=["t.py::test_a"]),
        _t(5, status="ok", reward=1.0, components={"all_pass": 1.0}),  # passed: not a failure
        _t(6, status="ok", reward=0.0, components={"all_pass": 1.0}, flags=["test_tampering"]),  # flagged
    ]
    cs = cluster(sorted(trajs, key=lambda t: -t.created_at))
    assert [c.count for c in cs] == [2, 1, 1, 1]
    assert cs[0].status == "infra_error" and cs[0].examples == ["t2", "t1"]
    assert {tuple(c.failing_tests) for c in cs} >= {("t.py::test_a", "t.py::test_b"), ("t.py::test_a",)}
    assert any(c.flags == ["test_tampering"] for c in cs)


class _BreaksItMore:
    """Writes a wrong clamp and submits: a judged failure with failing hidden tests."""

    name = "breaker"
    version = 0

    async def act(self, request):
        turn = sum(m["role"] == "assistant" for m in request.messages)
        if turn == 0:
            bad = "def clamp(x, lo, hi):\n    return x\n"
            return Action(tool_call_message("write_file", {"path": "mathx/core.py", "content": bad}, "c0"))
        return Action(tool_call_message("submit", {}, "c1"))

    async def close(self):
        return None


def test_failures_list_and_promote_through_the_cli(backend, clamp_task, tmp_path):
    store_path = tmp_path / "s.db"
    store = SQLiteStore(store_path)

    async def go(policy, tasks, run_id):
        pool = SandboxPool(backend)
        try:
            return await RolloutScheduler(pool, PytestJudge(backend), store, concurrency=2).run(
                tasks, policy, 2, run_id=run_id
            )
        finally:
            await pool.close()

    s = asyncio.run(go(_BreaksItMore(), [clamp_task], "r1"))
    assert s.statuses == {"ok": 2} and s.reward_mean == 0.0
    store.close()

    r = sp("failures", "list", "--store", store_path, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["total_failures"] == 2 and len(doc["clusters"]) == 1
    c = doc["clusters"][0]
    assert c["status"] == "ok" and c["count"] == 2 and c["tasks"] == {clamp_task.id: 2}
    assert "test_hidden_clamp.py::test_below" in c["failing_tests"]

    r = sp("failures", "promote", c["id"], "--store", store_path, "--tasks", clamp_task.path.parent,
           "--out", tmp_path / "new", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    (made,) = json.loads(r.stdout)["tasks"]
    new = load_task(made["path"])
    assert "promoted-failure" in new.spec.tags and new.spec.provenance.source.startswith("failure cluster")
    assert (new.workspace / "mathx/core.py").read_text() == "def clamp(x, lo, hi):\n    return x\n"
    # the new task is a real task: its initial state fails the hidden tests, the oracle repairs it
    store = SQLiteStore(tmp_path / "s2.db")
    s = asyncio.run(go(OraclePolicy(), [new], "r2"))
    assert s.statuses == {"ok": 2} and s.reward_mean == 1.0
    store.close()

    r = sp("failures", "promote", c["id"], "--store", store_path, "--as", "regression", "--out", tmp_path / "reg",
           "--json")  # fmt: skip
    cases = [json.loads(ln) for ln in Path(json.loads(r.stdout)["path"]).read_text().splitlines()]
    assert len(cases) == 2 and all(k["diff"]["files"] and k["reward"] == 0.0 for k in cases)

    r = sp(
        "failures", "promote", "nosuchcluster", "--store", store_path, "--as", "regression", "--out", tmp_path
    )
    assert r.returncode != 0 and "no failure cluster" in r.stderr and len(r.stderr.strip().splitlines()) == 1
