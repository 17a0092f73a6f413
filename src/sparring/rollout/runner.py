"""The seam between the scheduler (groups, ids, statuses, the store) and where a sample is played.

By default the scheduler plays and judges each sample in this process. A
:class:`SampleRunner` plays it somewhere else (a node actor on another
machine, a simulated node) and hands back the judged trajectory; the
scheduler keeps everything else: the group plan, the trajectory ids, the
replay rounds, the one writer to the store, resume. So a distributed run
accounts for its samples exactly as a local one does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sparring.policy.base import Policy
from sparring.tasks.loader import Task
from sparring.trajectory import Trajectory


@dataclass
class SampleRequest:
    """One sample to play and judge: what a node needs, and the attempts it already took."""

    task: Task
    policy: Policy
    index: int
    traj_id: str
    group_id: str
    run_id: str
    seed: int
    attempts: int = 0
    infra_errors: list[str] = field(default_factory=list)
    max_steps: int | None = None
    """The driver's step budget (None: the task's own)."""


class SampleRunner(Protocol):
    """Plays one sample to a final, judged trajectory carrying its ``attempts`` and ``infra_errors``.

    Infrastructure faults it cannot get past end as an ``infra_error`` trajectory (reward None);
    it raises only for a fault of the driver itself (which fails the run loudly)."""

    @property
    def capacity(self) -> int:
        """Samples it can play at once (the scheduler's rollout slots)."""

    async def run(self, req: SampleRequest) -> Trajectory: ...


def unplayed(req: SampleRequest, error: str) -> Trajectory:
    """The record of a sample no node could finish: ``infra_error``, reward None (never 0), every
    attempt listed, so it is stored, replayed in a later round, and never enters a gradient."""
    task = req.task
    t = Trajectory(
        run_id=req.run_id, task_id=task.id, task_version=task.spec.version, task_digest=task.digest,
        family=task.spec.family, difficulty=task.spec.difficulty, group_id=req.group_id,
        sample_index=req.index, policy=req.policy.name, policy_version=req.policy.version,
        status="infra_error", reward=None, error=error, attempts=req.attempts,
        infra_errors=list(req.infra_errors),
    )  # fmt: skip
    t.id = req.traj_id
    return t
