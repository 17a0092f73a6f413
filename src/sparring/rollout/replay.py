"""Replay: re-execute a stored trajectory's tool calls in a fresh sandbox and report divergence.

The policy is not consulted: the recorded actions are applied in order, each
output compared with the recorded one, then the final diff and the judge's
reward. A replay that matches shows the environment is deterministic for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sparring.env.tools import ToolExecutor
from sparring.errors import TaskError
from sparring.judge.base import Judge, score_with_usage
from sparring.rollout.episode import trajectory_usage
from sparring.sandbox.base import SandboxBackend, WorkspaceDiff
from sparring.tasks.loader import Task
from sparring.tasks.sandbox_spec import aspec_for_task
from sparring.trajectory import Trajectory


@dataclass
class ReplayReport:
    id: str
    steps: int = 0
    divergent: list[dict[str, Any]] = field(default_factory=list)
    diff_matches: bool = True
    reward_stored: float | None = None
    reward_replayed: float | None = None

    @property
    def identical(self) -> bool:
        return not self.divergent and self.diff_matches and self.reward_replayed == self.reward_stored

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "identical": self.identical, "steps": self.steps, "divergent_steps": self.divergent,
            "diff_matches": self.diff_matches, "reward_stored": self.reward_stored, "reward_replayed": self.reward_replayed,
        }  # fmt: skip


def task_of(traj: Trajectory, tasks: Iterable[Task], where: str = "") -> Task:
    """The task ``traj`` was rolled out on among ``tasks``: the version with its digest, else (a task
    changed since) the first of its id; TaskError naming the trajectory if none has its id."""
    matches = [t for t in tasks if t.id == traj.task_id]
    if not matches:
        raise TaskError(
            f"task {traj.task_id} of trajectory {traj.id} is not under {where or 'the tasks given'}"
        )
    exact = [t for t in matches if t.digest == traj.task_digest]
    return (exact or matches)[0]


def _norm(s: str) -> str:
    # Durations printed by pytest ("in 0.03s") differ run to run; they are not divergence.
    import re

    return re.sub(r"\bin \d+\.\d+s\b", "in Xs", s)


async def replay(traj: Trajectory, task: Task, backend: SandboxBackend, judge: Judge | None) -> ReplayReport:
    if task.digest != traj.task_digest:
        raise TaskError(
            f"task {task.id} has digest {task.digest[:19]}…, the trajectory was made on {traj.task_digest[:19]}…"
        )
    rep = ReplayReport(traj.id, reward_stored=traj.reward)
    sb = await backend.create(await aspec_for_task(task))
    try:
        ex = ToolExecutor(sb, task.spec.tools, exec_timeout=task.spec.limits.exec_timeout_s,
                          custom=task.spec.custom_tools)  # fmt: skip
        for st in traj.steps:
            out = await ex.run(st.name, st.arguments if st.arguments is not None else st.raw_arguments)
            got = out.output if out.error is None else f"error: {out.error}"
            rep.steps += 1
            if _norm(got) != _norm(st.output):
                rep.divergent.append(
                    {"index": st.index, "name": st.name, "stored": st.output[:200], "replayed": got[:200]}
                )
        diff = await sb.diff()
        rep.diff_matches = (
            diff.to_json() == WorkspaceDiff.from_json(traj.diff).to_json() if traj.diff else diff.is_empty()
        )
        if judge is not None:
            rep.reward_replayed = (await score_with_usage(judge, task, diff, trajectory_usage(traj))).reward
    finally:
        await sb.close()
    return rep
