"""Live progress: what the rollout CLI shows on stderr while it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sparring.rollout.progress import describe
from sparring.rollout.scheduler import SchedulerStats

EXE = Path(sys.executable).parent / "sparring"


def test_describe_names_every_counter_that_matters():
    s = SchedulerStats(requested=10, in_flight=3, judging=1, done=4, failed=1, retried=2)
    text = describe(s)
    for part in ("in flight 3", "judging 1", "failed 1", "retried 2", "/min"):
        assert part in text
    assert "replayed" not in text  # zero extras stay quiet
    assert "replayed 1" in describe(SchedulerStats(replayed=1))


def test_rollout_cli_shows_progress_on_stderr_and_keeps_stdout_for_results(clamp_task, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"}
    r = subprocess.run([str(EXE), "rollout", "--tasks", str(clamp_task.path), "--policy", "oracle",
                        "--group-size", "2", "--store", str(tmp_path / "s.db")],
                       capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "rollouts" in r.stderr and "2/2" in r.stderr and "in flight" in r.stderr
    assert "requested" in r.stdout and "in flight" not in r.stdout
