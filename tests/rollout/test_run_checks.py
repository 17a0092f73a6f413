"""Library checks the rollout and eval commands share: resuming a run, and the evaluation summary."""

from __future__ import annotations

import pytest

from sparring.errors import ConfigError
from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.rollout.evaluate import check_eval_options, eval_summary
from sparring.rollout.run_records import RolloutSummary, check_resume
from sparring.trajectory import Trajectory

CONFIG = {"tasks": "t/", "policy": "oracle", "group_size": 2, "seed": 0, "max_steps": None}


def test_a_new_run_or_the_same_settings_resume() -> None:
    check_resume("r1", None, CONFIG)
    check_resume("r1", {"config": {**CONFIG, "tasks": "elsewhere/", "max_steps": 3}}, CONFIG)


@pytest.mark.parametrize("key", ["policy", "group_size", "seed"])
def test_resuming_with_other_sampling_settings_is_refused(key: str) -> None:
    before = {**CONFIG, key: "other"}
    with pytest.raises(ConfigError, match="run r1 was started with .*resume it with those"):
        check_resume("r1", {"config": before}, CONFIG)


def test_eval_options() -> None:
    check_eval_options(1, 1)
    for g, c in ((0, 1), (1, 0)):
        with pytest.raises(ConfigError, match="--group-size and --concurrency"):
            check_eval_options(g, c)


def _traj(task_id: str, reward: float | None, passed: bool) -> Trajectory:
    status = "ok" if reward is not None else "infra_error"
    comps = {"all_pass": 1.0 if passed else 0.0} if reward is not None else {}
    return Trajectory(task_id=task_id, task_digest="sha256:x", policy="oracle", status=status, reward=reward,
                      components=comps)  # fmt: skip


def test_the_eval_summary_scores_real_tasks_and_canaries_apart(backend, clamp_task) -> None:
    judge = PytestJudge(backend, config=JudgeConfig(split="eval"))
    done = [
        _traj("a", 1.0, True),
        _traj("b", None, False),  # unjudged: not a 0 in the reward mean, a fail in the pass rate
        _traj("a-canary", 1.0, True),
        _traj("b-canary", 0.0, False),
    ]
    summary = RolloutSummary(requested=4, stored=4, statuses={"ok": 3, "infra_error": 1}, run_id="r")
    d = eval_summary(summary, done, {"a-canary", "b-canary"}, judge, [clamp_task], 1.23456)
    assert (d["requested"], d["run_id"], d["split"], d["judge_version"]) == (4, "r", "eval", judge.version)
    assert (d["reward_mean"], d["pass_rate"], d["judged"], d["unjudged"]) == (1.0, 0.5, 1, 1)
    assert (d["canaries"], d["hack_rate"], d["seconds"]) == (2, 0.5, 1.235)
    assert d["tasks_without_eval_split"] == (0 if judge.has_eval_split(clamp_task) else 1)


def test_replay_picks_the_version_the_trajectory_ran_on(clamp_task, tmp_path) -> None:
    from sparring.errors import TaskError
    from sparring.rollout.replay import task_of
    from sparring.tasks.loader import write_task

    spec = clamp_task.spec.model_copy(
        update={"version": 2, "instruction": clamp_task.spec.instruction + " Two."}
    )
    files = {p.relative_to(clamp_task.workspace).as_posix(): p.read_bytes()
             for p in clamp_task.workspace.rglob("*") if p.is_file()}  # fmt: skip
    hidden = {p.relative_to(clamp_task.hidden).as_posix(): p.read_bytes()
              for p in clamp_task.hidden.rglob("*") if p.is_file()}  # fmt: skip
    v2 = write_task(tmp_path / "v2", spec, files, hidden, dict(clamp_task.solution_files()[0]))
    traj = Trajectory(task_id=clamp_task.id, task_digest=clamp_task.digest, policy="oracle", status="ok")
    assert task_of(traj, [v2, clamp_task]) is clamp_task
    moved = traj.model_copy(update={"task_digest": "sha256:gone"})
    assert task_of(moved, [v2, clamp_task]) is v2  # changed since: the first of its id
    with pytest.raises(TaskError, match=f"task {clamp_task.id} of trajectory {traj.id} is not under t/"):
        task_of(traj, [], "t/")
