"""Group rollouts with bounded concurrency, retries of infra faults and no lost samples.

For each task, ``group_size`` samples form one GRPO group. A sample whose
sandbox fails is retried on a fresh sandbox (up to ``max_retries``); if it
keeps failing it is stored as ``infra_error`` — flagged, never a reward of 0
in a gradient. Every sample is written to the store before it is counted.
"""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sparring.errors import SandboxError
from sparring.judge.base import Judge
from sparring.policy.base import Policy
from sparring.rollout.episode import run_episode
from sparring.rollout.trajectory import Trajectory
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajectoryStore
from sparring.tasks.loader import Task


@dataclass
class RolloutSummary:
    requested: int = 0
    stored: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    reward_mean: float = 0.0
    pass_rate: float = 0.0
    seconds: float = 0.0
    trajectories: list[Trajectory] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "requested": self.requested,
            "stored": self.stored,
            "statuses": self.statuses,
            "retried": self.retried,
            "reward_mean": round(self.reward_mean, 6),
            "pass_rate": round(self.pass_rate, 6),
            "seconds": round(self.seconds, 3),
        }


class RolloutScheduler:
    def __init__(
        self,
        pool: SandboxPool,
        judge: Judge,
        store: TrajectoryStore | None,
        *,
        concurrency: int = 4,
        max_retries: int = 2,
        max_steps: int | None = None,
        on_done: Callable[[Trajectory], None] | None = None,
    ) -> None:
        self.pool = pool
        self.judge = judge
        self.store = store
        self.sem = asyncio.Semaphore(max(1, concurrency))
        self.max_retries = max_retries
        self.max_steps = max_steps
        self.on_done = on_done

    async def _one(self, task: Task, policy: Policy, idx: int, group_id: str, run_id: str, seed: int) -> tuple[Trajectory, int]:
        retries = 0
        last_err = ""
        async with self.sem:
            for attempt in range(1, self.max_retries + 2):
                sb = None
                broken = False
                try:
                    sb = await self.pool.acquire(task)
                    traj = await run_episode(
                        task, policy, sb, self.judge, sample_index=idx, seed=seed,
                        group_id=group_id, run_id=run_id, max_steps=self.max_steps,
                    )  # fmt: skip
                    traj.attempts = attempt
                    return traj, retries
                except (SandboxError, OSError) as e:
                    broken = True
                    last_err = f"{type(e).__name__}: {e}"
                    if attempt <= self.max_retries:
                        retries += 1
                        await asyncio.sleep(0.05 * 2 ** (attempt - 1))
                except Exception as e:  # a bug must not lose the sample: store it, flagged, with its cause
                    broken = True
                    last_err = "unexpected " + "".join(traceback.format_exception_only(e)).strip()
                    break
                finally:
                    if sb is not None:
                        await self.pool.release(sb, broken=broken)
        traj = Trajectory(
            run_id=run_id, task_id=task.id, task_version=task.spec.version, task_digest=task.digest,
            family=task.spec.family, difficulty=task.spec.difficulty, group_id=group_id, sample_index=idx,
            policy=policy.name, policy_version=policy.version, judge_version=getattr(self.judge, "version", ""),
            status="infra_error", error=last_err, attempts=self.max_retries + 1,
        )  # fmt: skip
        return traj, retries

    async def run(
        self, tasks: list[Task], policy: Policy, group_size: int, *, run_id: str | None = None, seed: int = 0
    ) -> RolloutSummary:
        run_id = run_id or uuid.uuid4().hex[:12]
        t0 = time.perf_counter()
        summary = RolloutSummary(requested=len(tasks) * group_size)

        async def job(task: Task, idx: int, gid: str) -> Trajectory:
            traj, retries = await self._one(task, policy, idx, gid, run_id, seed)
            if self.store is not None:
                await asyncio.to_thread(self.store.put, traj)
                summary.stored += 1
            summary.retried += retries
            if self.on_done:
                self.on_done(traj)
            return traj

        coros = []
        for task in tasks:
            gid = f"{run_id}:{task.id}:{uuid.uuid4().hex[:6]}"
            coros += [job(task, i, gid) for i in range(group_size)]
        trajs = list(await asyncio.gather(*coros))
        summary.trajectories = trajs
        summary.statuses = dict(Counter(t.status for t in trajs))
        summary.reward_mean = sum(t.reward for t in trajs) / len(trajs) if trajs else 0.0
        summary.pass_rate = sum(1 for t in trajs if t.passed) / len(trajs) if trajs else 0.0
        summary.seconds = time.perf_counter() - t0
        return summary
