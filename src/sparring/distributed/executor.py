"""Where rollouts execute. The loop talks to a :class:`RolloutExecutor`; the local
one runs the asyncio scheduler in this process, a Ray one (issue: distributed
pools) will run the same scheduler inside actors on other nodes.

``sparring rollout --executor local|ray`` picks one through :func:`make_executor`.
"""

from __future__ import annotations

from typing import Protocol

from sparring.errors import ConfigError, NotBuiltError
from sparring.policy.base import Policy
from sparring.rollout.scheduler import RolloutScheduler, RolloutSummary
from sparring.tasks.loader import Task

EXECUTORS = ("local", "ray")


class RolloutExecutor(Protocol):
    async def rollout(
        self, tasks: list[Task], policy: Policy, group_size: int, *, run_id: str, seed: int,
        priority: str = "train", resume: bool = False, keep_trajectories: bool = True,
    ) -> RolloutSummary: ...  # fmt: skip

    def request_stop(self) -> None:
        """Finish what is in flight (within the drain time), checkpoint, return an interrupted summary."""


class LocalExecutor:
    """Runs rollouts in this process through a :class:`RolloutScheduler`."""

    def __init__(self, scheduler: RolloutScheduler) -> None:
        self.scheduler = scheduler

    async def rollout(
        self, tasks: list[Task], policy: Policy, group_size: int, *, run_id: str, seed: int,
        priority: str = "train", resume: bool = False, keep_trajectories: bool = True,
    ) -> RolloutSummary:  # fmt: skip
        return await self.scheduler.run(
            tasks, policy, group_size, run_id=run_id, seed=seed, priority=priority, resume=resume,
            keep_trajectories=keep_trajectories,
        )  # fmt: skip

    def request_stop(self) -> None:
        self.scheduler.request_stop()


def check_executor(name: str) -> None:
    """Refuse an unknown or unavailable executor before any work (one-line error)."""
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}; use one of {', '.join(EXECUTORS)}")
    if name == "ray":
        ray_executor()


def make_executor(name: str, scheduler: RolloutScheduler) -> RolloutExecutor:
    check_executor(name)
    return LocalExecutor(scheduler)


def ray_executor(*_: object, **__: object) -> RolloutExecutor:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise NotBuiltError(
            "the Ray executor needs `pip install 'sparring[ray]'`; use --executor local"
        ) from None
    raise NotBuiltError("the Ray executor is planned; use --executor local")
