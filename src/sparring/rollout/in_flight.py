"""What the rollout scheduler keeps of each sample in flight: its group, its state, its outcome, and the
state of one ``run()`` call (:mod:`sparring.rollout.scheduler` drives them; nothing here runs anything)."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field

from sparring.policy.base import Policy
from sparring.rollout.branching import BranchPoint
from sparring.rollout.episode import Episode
from sparring.rollout.run_records import SchedulerStats
from sparring.rollout.writer import BatchWriter
from sparring.tasks.loader import Task
from sparring.trajectory import Trajectory


@dataclass(eq=False)
class SampleGroup:
    task: Task
    gid: str
    size: int
    members: list[Sample] = field(default_factory=list)
    trainable: int = 0


@dataclass(eq=False)
class Sample:
    group: SampleGroup
    index: int
    traj_id: str
    attempts: int = 0
    infra_errors: list[str] = field(default_factory=list)
    state: str = "waiting"  # waiting | running | judging | finishing | done | cancelled
    traj: Trajectory | None = None  # kept only with keep_trajectories (memory: thousands of rollouts)
    outcome: Outcome | None = None
    handle: asyncio.Task[None] | None = None
    parent: Sample | None = None  # a branch: the root it was forked from, at ``point``, branch ``k``
    point: BranchPoint | None = None
    k: int = 0
    episode: Episode | None = None  # a root with branch points: kept until its branches are played

    @property
    def is_branch(self) -> bool:
        return self.point is not None


@dataclass(frozen=True)
class Outcome:
    """What the summary needs of a finished sample, without its (possibly large) record."""

    status: str
    reward: float | None
    passed: bool

    @classmethod
    def of(cls, t: Trajectory) -> Outcome:
        return cls(t.status, t.reward, t.passed)


def sample_id(run_id: str, nonce: str, seed: int, ordinal: int, task: Task, index: int) -> str:
    """A sample's trajectory id: the same on every resume of the same run, unique across runs."""
    key = f"{run_id}\x00{nonce}\x00{seed}\x00{ordinal}\x00{task.id}\x00{task.digest}\x00{index}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


@dataclass(eq=False)
class RunState:
    """The state of one ``run()`` call (several may share one scheduler and its resources)."""

    run_id: str
    policy: Policy
    seed: int
    keep: bool
    stats: SchedulerStats
    groups: list[SampleGroup] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    writer: BatchWriter | None = None
    max_steps: int | None = None  # the driver's step budget when a node plays the sample
    branches: list[Sample] = field(default_factory=list)
