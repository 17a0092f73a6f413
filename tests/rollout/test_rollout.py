"""Multi-turn rollouts with scripted policies, real sandboxes, the real judge and a real SQLite store."""

from __future__ import annotations

import asyncio

from sparring.errors import PolicyError, SandboxError
from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.base import Action
from sparring.policy.scripted import OraclePolicy, RandomPolicy
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore


def run_sched(backend, store, tasks, policy, group, **kw):
    async def go():
        pool = SandboxPool(backend, max_idle=2)
        try:
            return await RolloutScheduler(pool, PytestJudge(backend), store, concurrency=2, **kw).run(
                tasks, policy, group
            )
        finally:
            await pool.close()

    return asyncio.run(go())


def test_oracle_solves_and_everything_is_stored(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    s = run_sched(backend, store, [clamp_task], OraclePolicy(), 2)
    assert s.requested == s.stored == 2 and s.statuses == {"ok": 2} and s.reward_mean == 1.0
    total, trajs = store.search(TrajQuery(task_id=clamp_task.id))
    assert total == 2
    t = store.get(trajs[0].id)
    assert t.task_digest == clamp_task.digest and t.judge_version.startswith("pytest-judge/")
    names = [st.name for st in t.steps]
    assert names == ["list_dir", "read_file", "str_replace", "run_tests", "submit"]
    assert "passed" in t.steps[3].output  # full tool output is kept
    roles = [m["role"] for m in t.messages]
    assert roles[:2] == ["system", "user"] and roles.count("tool") == 5
    assert t.diff["files"]["mathx/core.py"]["text"].count("return hi") == 1
    assert t.steps[2].arguments == {
        "path": "mathx/core.py",
        "old": "    if x > hi:\n        return lo\n    return x\n",
        "new": "    if x > hi:\n        return hi\n    return x\n",
    }
    assert t.timings["judge_ms"] > 0 and t.group_id and t.steps[0].duration_ms >= 0
    # the judge got the rollout's usage: 5 tool calls, no generated tokens (a scripted policy)
    from sparring.judge.reward import usage_efficiency

    ms = clamp_task.spec.limits.max_steps
    assert abs(t.components["usage"] - usage_efficiency(5, ms, 0, ms * 256)) < 1e-6
    assert len({t.group_id for t in trajs}) == 1
    store.close()


def test_random_scores_zero(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    s = run_sched(backend, store, [clamp_task], RandomPolicy(), 4, max_steps=6)
    assert s.stored == 4 and s.reward_mean == 0.0
    assert set(s.statuses) <= {"ok", "truncated"}
    store.close()


class _BrokenPolicy:
    name = "broken"
    version = 0

    async def act(self, request):
        raise PolicyError("server down")

    async def close(self):
        return None


class _SilentPolicy:
    """Never calls a tool: the loop must nudge it and end on the step budget."""

    name = "silent"
    version = 0

    async def act(self, request):
        return Action({"role": "assistant", "content": "thinking..."})

    async def close(self):
        return None


def test_policy_errors_and_step_budget_are_typed(backend, clamp_task):
    s = run_sched(backend, None, [clamp_task], _BrokenPolicy(), 1)
    assert s.statuses == {"policy_error": 1} and s.trajectories[0].error == "server down"
    s = run_sched(backend, None, [clamp_task], _SilentPolicy(), 1, max_steps=3)
    t = s.trajectories[0]
    assert t.status == "truncated" and sum(m["role"] == "user" for m in t.messages) == 4


class FlakyBackend:
    """The real local backend, with its first `fail` creates raising (fault injection)."""

    name = "flaky"

    def __init__(self, real, fail):
        self.real, self.fail = real, fail

    async def create(self, spec, snapshot=None):
        if self.fail > 0:
            self.fail -= 1
            raise SandboxError("injected: sandbox failed to start")
        return await self.real.create(spec)


def test_infra_failures_are_retried_then_flagged_not_dropped(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")

    async def go(fail):
        flaky = FlakyBackend(backend, fail)
        pool = SandboxPool(flaky)
        sched = RolloutScheduler(pool, PytestJudge(backend), store, concurrency=1, max_retries=2)
        try:
            return await sched.run([clamp_task], OraclePolicy(), 1)
        finally:
            await pool.close()

    s = asyncio.run(go(1))
    assert s.statuses == {"ok": 1} and s.retried == 1 and s.trajectories[0].attempts == 2
    s = asyncio.run(go(10))
    t = s.trajectories[0]
    # 3 attempts, written as infra_error, then one replay round of 3 more: still failing
    assert s.statuses == {"infra_error": 1} and t.attempts == 6 and "injected" in (t.error or "")
    assert len(t.infra_errors) == 6 and s.replayed == 1
    assert not t.trainable and t.reward is None
    assert store.count() == 2
    store.close()


def test_random_policy_is_deterministic(backend, clamp_task):
    a = run_sched(backend, None, [clamp_task], RandomPolicy(), 1, max_steps=4)
    b = run_sched(backend, None, [clamp_task], RandomPolicy(), 1, max_steps=4)
    assert [s.name for s in a.trajectories[0].steps] == [s.name for s in b.trajectories[0].steps]


class _MalformedThenSubmit:
    """First a call with arguments that are not JSON, then an unknown tool, then submit."""

    name = "malformed"
    version = 0

    async def act(self, request):
        from sparring.policy.scripted import tool_call_message

        turn = sum(m["role"] == "assistant" for m in request.messages)
        if turn == 0:
            msg = tool_call_message("write_file", {}, "call_0")
            msg["tool_calls"][0]["function"]["arguments"] = '{"path": "a.py", "content": '
            return Action(msg)
        if turn == 1:
            return Action(tool_call_message("launch_rockets", {"n": 3}, "call_1"))
        return Action(tool_call_message("submit", {}, "call_2"))

    async def close(self):
        return None


def test_malformed_tool_arguments_are_an_error_observation_not_a_crash(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    s = run_sched(backend, store, [clamp_task], _MalformedThenSubmit(), 1)
    t = store.get(s.trajectories[0].id)
    assert t.status == "ok" and t.reward == 0.0  # judged: the policy's own (bad) work
    assert "not valid JSON" in (t.steps[0].error or "") and t.steps[0].arguments is None
    assert t.steps[0].raw_arguments.startswith('{"path"')
    assert "unknown tool" in (t.steps[1].error or "")
    tool_msgs = [m["content"] for m in t.messages if m["role"] == "tool"]
    assert tool_msgs[0].startswith("error:") and tool_msgs[1].startswith("error:")
    store.close()


def test_adversarial_policy_hacks_are_zeroed_through_the_loop(backend, clamp_task, tmp_path):
    from sparring.policy.spec import make_policy

    store = SQLiteStore(tmp_path / "s.db")
    for cls in ("conftest_forces_pass", "os_exit_at_import", "eq_overload"):
        s = run_sched(backend, store, [clamp_task], make_policy(f"adversarial:{cls}"), 1)
        assert s.stored == 1 and s.reward_mean == 0.0, cls
    _, trajs = store.search(TrajQuery(task_id=clamp_task.id))
    assert all(t.flags for t in trajs) and len(trajs) == 3
    store.close()
