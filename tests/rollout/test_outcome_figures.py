"""Summaries never sum an unjudged reward: None (infra, policy or judge error) is not 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sparring.rollout.run_records import outcome_figures
from sparring.trajectory import Trajectory

SPARRING = str(Path(sys.executable).parent / "sparring")


def _traj(status: str, reward: float | None, all_pass: float = 0.0) -> Trajectory:
    return Trajectory(task_id="t", task_digest="d", policy="p", status=status, reward=reward,  # type: ignore[arg-type]
                      components={"all_pass": all_pass})  # fmt: skip


def test_reward_mean_is_over_judged_trajectories_only():
    trajs = [_traj("ok", 1.0, 1.0), _traj("ok", 0.5), _traj("policy_error", None), _traj("infra_error", None)]
    f = outcome_figures(trajs)
    assert f == {"pass_rate": 0.25, "reward_mean": 0.75, "judged": 2, "unjudged": 2}
    assert outcome_figures([_traj("judge_error", None)])["reward_mean"] == 0.0
    assert outcome_figures([]) == {"pass_rate": 0.0, "reward_mean": 0.0, "judged": 0, "unjudged": 0}


def test_eval_of_a_policy_that_never_answers_reports_unjudged_samples(clamp_task, tmp_path):
    # every sample ends as policy_error (reward None): eval used to crash summing None
    r = subprocess.run([SPARRING, "eval", "--tasks", str(clamp_task.path), "--store", str(tmp_path / "s.db"),
                        "--policy", "openai:http://127.0.0.1:9/v1#m", "--json"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["statuses"] == {"policy_error": 1} and d["unjudged"] == 1 and d["judged"] == 0
    assert d["reward_mean"] == 0.0 and d["pass_rate"] == 0.0
