"""Where rollouts execute. The loop talks to a :class:`RolloutExecutor`; the local
one runs the asyncio scheduler in this process, a Ray one (issue: distributed
pools) will run the same scheduler inside actors on other nodes.
"""

from __future__ import annotations

from typing import Protocol

from sparring.errors import NotBuiltError
from sparring.policy.base import Policy
from sparring.rollout.scheduler import RolloutScheduler, RolloutSummary
from sparring.tasks.loader import Task


class RolloutExecutor(Protocol):
    async def rollout(self, tasks: list[Task], policy: Policy, group_size: int, *, run_id: str, seed: int) -> RolloutSummary: ...


class LocalExecutor:
    """Runs rollouts in this process through a :class:`RolloutScheduler`."""

    def __init__(self, scheduler: RolloutScheduler) -> None:
        self.scheduler = scheduler

    async def rollout(self, tasks: list[Task], policy: Policy, group_size: int, *, run_id: str, seed: int) -> RolloutSummary:
        return await self.scheduler.run(tasks, policy, group_size, run_id=run_id, seed=seed)


def ray_executor(*_: object, **__: object) -> RolloutExecutor:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise NotBuiltError("the Ray executor needs `pip install 'sparring[ray]'`") from None
    raise NotBuiltError("the Ray executor is planned; use the local executor")
