"""`sparring demo --quick` end to end through the real CLI: tasks, tiny model, SFT, GRPO, store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "sparring"


@pytest.mark.slow
def test_demo_quick_runs_the_whole_loop(tmp_path):
    r = subprocess.run(
        [str(EXE), "demo", "--quick", "--json", "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert set(d) >= {"iterations", "heldout", "seconds"}
    assert len(d["iterations"]) == 2
    for i, it in enumerate(d["iterations"]):
        assert it["iteration"] == i and set(it) >= {"reward_mean", "pass_rate", "statuses"}
        assert sum(it["statuses"].values()) == it["rollouts"] == 8
        assert 0.0 <= it["pass_rate"] <= 1.0
    assert set(d["heldout"]) >= {"before_rl", "after_rl"}
    # The warm start really trained on oracle trajectories.
    assert d["sft"]["oracle_pass_rate"] == 1.0 and d["sft"]["loss_last"] < d["sft"]["loss_first"]
    # Every sample landed in the real SQLite store; the table went to stderr.
    con = sqlite3.connect(d["store"])
    n = con.execute("select count(*) from trajectories").fetchone()[0]
    assert n == 8 + 2 * 4 + 2 * 8  # oracle warm start + held-out before/after + iterations
    assert "RL iterations" in r.stderr
    metrics = list((tmp_path / "demo" / "metrics").glob("*.jsonl"))
    assert len(metrics) == 1 and len(metrics[0].read_text().splitlines()) == 2
