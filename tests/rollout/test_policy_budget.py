"""The task's wall clock bounds the agent's commands; the policy's time is its own (issue 38)."""

from __future__ import annotations

import asyncio

from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.base import Action
from sparring.rollout.episode import StageLimits
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore


class _SlowLooker:
    """Thinks 1.5 s before every turn (a real model on a busy CPU), then runs a cheap command; submits third."""

    name = "slow"
    version = 0

    def __init__(self, task):
        self.task = task

    async def act(self, request):
        await asyncio.sleep(1.5)
        name = "submit" if request.step >= 2 else "list_dir"
        args = "{}" if name == "submit" else '{"path": "."}'
        call = {"id": f"c{request.step}", "type": "function", "function": {"name": name, "arguments": args}}
        return Action({"role": "assistant", "content": "", "tool_calls": [call]})

    async def close(self):
        return None


def _run(backend, store, policy, run_id, limits):
    async def go():
        pool = SandboxPool(backend, max_idle=1)
        try:
            sched = RolloutScheduler(pool, PytestJudge(backend), store, concurrency=1, limits=limits)
            return await sched.run([policy.task], policy, 1, run_id=run_id)
        finally:
            await pool.close()

    return asyncio.run(go())


def test_a_slow_policy_is_not_a_timeout(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    pol = _SlowLooker(clamp_task)
    # the wall budget (1 s) is shorter than the policy's thinking (1.5 s a turn, 3 turns)
    s = _run(backend, store, pol, "slow", StageLimits(rollout_s=1.0))
    (t,) = store.search(TrajQuery(run_id="slow"))[1]
    assert s.statuses == {"ok": 1} and t.submitted, (s.statuses, t.error)
    assert t.timings["policy_ms"] > 4000 and t.timings["tool_ms"] < 1000
    # its own per-turn budget still bounds it: a turn past it is the policy's fault, not a timeout
    s = _run(backend, store, pol, "turn", StageLimits(policy_turn_s=0.5))
    (t,) = store.search(TrajQuery(run_id="turn"))[1]
    assert s.statuses == {"policy_error": 1} and "policy turn exceeded 0.5s" in (t.error or "")
    store.close()
