"""The Environment's judging and a rollout's scoring give the same verdict (issue 36).

Both go through :func:`sparring.env.judging.judge_diff`: a diff the host flagged
scores 0 with its flags without reaching the judge (a generous judge that would
give it 1.0 is never asked), and a judge that returns its own failure as a
``judge_error`` result makes both ``judge_error`` with reward None. The control:
an unflagged diff reaches the same judge and scores 1.0 on both paths.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sparring.env import Environment
from sparring.judge.base import JudgeResult
from sparring.rollout.episode import score_trajectory
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.families import generate
from sparring.tasks.loader import Task
from sparring.trajectory import Trajectory


class _Judge:
    """Scores every diff it is shown 1.0 (or reports a judge_error when ``fail``), and counts calls."""

    version = "generous/1"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    async def score(self, task: Task, diff: WorkspaceDiff) -> JudgeResult:
        self.calls += 1
        if self.fail:
            return JudgeResult(status="judge_error", reason="runner_crashed", reward=0.0, components={},
                               judge_version=self.version, log="the runner died")  # fmt: skip
        return JudgeResult(reward=1.0, components={"all_pass": 1.0}, judge_version=self.version)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return generate("code-repair", 1, 0, tmp_path_factory.mktemp("tasks"))[0]


def _both(task: Task, judge: _Judge, diff: WorkspaceDiff) -> tuple[dict[str, Any], Trajectory]:
    env = Environment(task, judge=judge)
    asyncio.run(env.ajudge(diff))
    info = {"status": env.status, "reward": env.reward, **env.judge_info()}
    traj = Trajectory(
        task_id=task.id, task_digest=task.digest, policy="test", status="ok", messages=env.messages
    )
    asyncio.run(score_trajectory(traj, task, diff, judge))
    return info, traj


def test_a_flagged_diff_scores_zero_with_its_flags_on_both_paths(task: Task) -> None:
    judge = _Judge()
    diff = WorkspaceDiff(files={"a.txt": b"x"}, flags=("workspace_too_large",), detail="1.5 GiB > 256 MiB")
    info, traj = _both(task, judge, diff)
    assert judge.calls == 0  # the judge never sees a workspace the host refused
    assert info["reward"] == traj.reward == 0.0
    assert info["flags"] == traj.flags == ["workspace_too_large"]
    assert info["components"] == traj.components == {}
    assert info["judge_version"] == traj.judge_version == "generous/1"


def test_an_unflagged_diff_reaches_the_judge_on_both_paths(task: Task) -> None:
    judge = _Judge()
    info, traj = _both(task, judge, WorkspaceDiff(files={"a.txt": b"x"}))
    assert judge.calls == 2
    assert info["reward"] == traj.reward == 1.0 and info["flags"] == traj.flags
    assert info["components"] == traj.components and info["components"]["all_pass"] == 1.0


def test_a_judge_error_result_is_a_judge_error_on_both_paths_never_a_zero(task: Task, tmp_path: Path) -> None:
    judge = _Judge(fail=True)
    info, traj = _both(task, judge, WorkspaceDiff(files={"a.txt": b"x"}))
    assert info["status"] == traj.status == "judge_error"
    assert info["reward"] is None and traj.reward is None
    assert "runner_crashed" in info["judge_error"] and "runner_crashed" in (traj.error or "")
