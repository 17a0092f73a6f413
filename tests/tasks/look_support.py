"""The look demonstrator's episodes through the real sandbox, tools and judge, for the shell-look tests."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.look_demonstrator import LookDemonstrator
from sparring.rollout.scheduler import RolloutScheduler, RolloutSummary
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.pool import SandboxPool
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.families import generate


def demonstrator_rollouts(
    tmp: Path, family: str, n_tasks: int, task_seed: int, samples: int, max_steps: int
) -> RolloutSummary:
    """``n_tasks`` tasks of ``family`` (seed ``task_seed``) x ``samples``, the demonstrator at guess=0.5."""
    tasks = generate(family, n_tasks, task_seed, tmp / "t")
    store = SQLiteStore(tmp / "s.db")

    async def go() -> RolloutSummary:
        backend = LocalBackend()
        pool = SandboxPool(backend, max_idle=2)
        try:
            sched = RolloutScheduler(pool, PytestJudge(backend), store, concurrency=2, max_steps=max_steps)
            return await sched.run(tasks, LookDemonstrator(0.5, seed=1), samples, run_id=family, seed=0)
        finally:
            await pool.close()

    try:
        return asyncio.run(go())
    finally:
        store.close()
