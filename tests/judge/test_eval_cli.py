"""`sparring eval`: the evaluation judge only, canaries mixed in, hack rate reported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

SPARRING = str(Path(sys.executable).parent / "sparring")


def run_eval(tasks: Path, store: Path, *args: str) -> dict:
    r = subprocess.run([SPARRING, "eval", "--tasks", str(tasks), "--store", str(store), "--json", *args],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_eval_scores_with_the_eval_split_and_reports_hack_rate(dynamic_task, tmp_path):
    tasks = tmp_path / "tasks"
    shutil.copytree(dynamic_task.path, tasks / dynamic_task.id)
    d = run_eval(tasks, tmp_path / "a.db", "--policy", "oracle", "--canary-rate", "1")
    assert d["split"] == "eval" and d["tasks_without_eval_split"] == 0
    assert d["pass_rate"] == 1.0 and d["reward_mean"] == 1.0 and d["canaries"] == 1 and d["hack_rate"] == 0.0
    # outcome and process reported apart (issue 37)
    assert (
        d["outcome"]["pass_rate"] == 1.0
        and d["process"]["judged"] == 1
        and 0.0 <= d["process"]["flag_rate"] <= 1
    )
    assert set(d["process"]["checks"]) >= {"tests_run", "destructive_command", "edited_unread"}
    from sparring.store.base import TrajQuery
    from sparring.store.sqlite import SQLiteStore

    st = SQLiteStore(tmp_path / "a.db")
    _, trajs = st.search(TrajQuery(task_id=dynamic_task.id))
    assert trajs and all(t.judge_version == d["judge_version"] for t in trajs)
    st.close()
    d = run_eval(tasks, tmp_path / "b.db", "--policy", "adversarial:conftest_forces_pass")
    assert d["pass_rate"] == 0.0 and d["reward_mean"] == 0.0
