"""Training runs unchanged on the sql and tool-use families: `sparring train --set family=...` with tiny
settings runs its iterations, the oracle teacher solves the generated tasks through their tools, and
every rollout is judged and stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore

SPARRING = str(Path(sys.executable).parent / "sparring")
TINY = """
n_train: 2
n_heldout: 1
heldout_samples: 1
seed: 4
sft_steps: 1
sft_batch: 1
iterations: 2
tasks_per_iteration: 1
group_size: 2
max_steps: 3
heldout_max_steps: 3
checkpoint_every: 0
model: {hidden: 32, layers: 1, heads: 4, vocab_size: 600, max_new_tokens: 8}
warm_start: {teacher: oracle, samples: 1, passed_only: false}
"""


@pytest.mark.slow
@pytest.mark.parametrize("family", ["sql", "tool-use"])
def test_train_runs_a_few_iterations_on_the_family(family: str, tmp_path: Path) -> None:
    work = tmp_path / "run"
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY + f"workdir: {work}\n")
    r = subprocess.run([SPARRING, "train", "--config", str(cfg), "--set", f"family={family}", "--json"],
                       capture_output=True, text=True, timeout=900, env=os.environ.copy())  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert len(out["iterations"]) == 2, out
    st = SQLiteStore(work / "store.db")
    try:
        _, trajs = st.search(TrajQuery(limit=200))
    finally:
        st.close()
    assert {t.task_id.split("-s")[0] for t in trajs} == {family}
    teacher = [t for t in trajs if t.run_id.endswith("-teacher")]
    assert teacher and all(t.reward == 1.0 for t in teacher), [(t.reward, t.failing_tests) for t in teacher]
    assert all(t.status in ("ok", "truncated") for t in trajs), {t.status for t in trajs}
