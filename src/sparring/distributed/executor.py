"""Where rollouts execute. The loop talks to a :class:`RolloutExecutor`: the local one runs the
asyncio scheduler's samples in this process; the Ray one keeps the same scheduler in the driver
and plays each sample on a node actor (:mod:`sparring.distributed.ray_runner`).

``sparring rollout --executor local|ray``, ``sparring eval`` and the training recipe
(``executor: ray``) pick one through :func:`make_executor`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparring.distributed.dispatch import PROBE_TIMEOUT_S
from sparring.errors import ConfigError, NotBuiltError
from sparring.policy.base import Policy
from sparring.rollout.scheduler import RolloutScheduler, RolloutSummary
from sparring.sandbox.config import LocalBackendConfig, OCIBackendConfig
from sparring.tasks.loader import Task

EXECUTORS = ("local", "ray")


class RolloutExecutor(Protocol):
    async def rollout(
        self, tasks: list[Task], policy: Policy, group_size: int, *, run_id: str, seed: int,
        priority: str = "train", resume: bool = False, keep_trajectories: bool = True,
    ) -> RolloutSummary: ...  # fmt: skip

    def request_stop(self) -> None:
        """Finish what is in flight (within the drain time), checkpoint, return an interrupted summary."""

    def attach(self, scheduler: RolloutScheduler) -> None:
        """Let another scheduler (an eval run beside a training run) play its samples here too."""

    async def aclose(self) -> None:
        """Release what the executor holds (node actors, a cluster it started)."""


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

    def attach(self, scheduler: RolloutScheduler) -> None:
        return None

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class RayOptions:
    """How to reach (or start) the cluster and what its node actors run."""

    address: str | None = None
    """A running cluster (``ray://...`` or ``HOST:PORT``); None starts an embedded one-node cluster."""
    capacity: int = 4
    """Sandboxes of the embedded cluster's one node (a real cluster's nodes say theirs)."""
    backend: LocalBackendConfig | OCIBackendConfig = field(default_factory=LocalBackendConfig)
    root: Path = field(default_factory=lambda: Path(os.environ.get("SPARRING_RAY_ROOT", "/tmp/sparring-ray")))
    """Where each node keeps its sandboxes and task cache (a local path on every node)."""
    image_root: Path | None = None
    """Each node's image store, filled by digest on first use (a local path on every node; None:
    ``$SPARRING_IMAGE_ROOT`` or ``~/.cache/sparring/images`` there). The driver resolves images in
    its own store (``$SPARRING_IMAGE_ROOT``, or ``driver_image_root``)."""
    driver_image_root: Path | None = None
    """The driver's image store, where task images are resolved to digests (None: the default store)."""
    sandbox_limits: bool = True
    judge: Any = None
    """The nodes' JudgeConfig (None: the training judge; ``sparring eval`` passes the eval split)."""
    export_dir: Path | None = None
    """Where a transformers policy trained here is saved per weights version for the nodes (a
    path every node reads; default: under ``root``)."""
    max_node_failures: int = 2
    episode_timeout_s: float | None = None
    probe_timeout_s: float = PROBE_TIMEOUT_S


class RayExecutor:
    """The scheduler in this process (the driver), its samples on Ray node actors."""

    def __init__(self, scheduler: RolloutScheduler, options: RayOptions) -> None:
        from sparring.distributed.cluster import connect
        from sparring.distributed.node import NodeConfig
        from sparring.distributed.ray_runner import RayRunner, RayRunnerOptions

        self.scheduler = scheduler
        self._owns_ray = connect(options.address, options.capacity)
        try:
            node_cfg = NodeConfig(options.root, options.capacity, scheduler.config, options.backend,
                                  options.sandbox_limits, options.judge, options.image_root)  # fmt: skip
            self.runner = RayRunner(node_cfg, RayRunnerOptions(
                max_node_failures=options.max_node_failures, episode_timeout_s=options.episode_timeout_s,
                probe_timeout_s=options.probe_timeout_s,
                export_dir=options.export_dir, image_root=options.driver_image_root,
            ))  # fmt: skip
        except BaseException:
            self._shutdown()
            raise
        self._attached: list[RolloutScheduler] = []
        self.attach(scheduler)

    def attach(self, scheduler: RolloutScheduler) -> None:
        scheduler.runner = self.runner
        scheduler._loop = None  # its rollout slots are now the nodes' capacity
        self._attached.append(scheduler)

    async def rollout(
        self, tasks: list[Task], policy: Policy, group_size: int, *, run_id: str, seed: int,
        priority: str = "train", resume: bool = False, keep_trajectories: bool = True,
    ) -> RolloutSummary:  # fmt: skip
        summary = await self.scheduler.run(
            tasks, policy, group_size, run_id=run_id, seed=seed, priority=priority, resume=resume,
            keep_trajectories=keep_trajectories,
        )  # fmt: skip
        summary.nodes = self.runner.dispatch.counts()
        return summary

    def request_stop(self) -> None:
        self.scheduler.request_stop()

    async def aclose(self) -> None:
        try:
            await self.runner.close()
        finally:
            for sched in self._attached:
                sched.runner, sched._loop = None, None
            self._shutdown()

    def _shutdown(self) -> None:
        if self._owns_ray:
            import ray

            ray.shutdown()
            self._owns_ray = False


def check_executor(name: str) -> None:
    """Refuse an unknown or unavailable executor before any work (one-line error)."""
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}; use one of {', '.join(EXECUTORS)}")
    if name == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise NotBuiltError(
                "the Ray executor needs `pip install 'sparring[ray]'`; use --executor local"
            ) from None


def make_executor(
    name: str, scheduler: RolloutScheduler, ray: RayOptions | None = None
) -> LocalExecutor | RayExecutor:
    check_executor(name)
    if name == "ray":
        return RayExecutor(scheduler, ray or RayOptions())
    return LocalExecutor(scheduler)
