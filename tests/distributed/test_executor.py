"""The executor seam: `sparring rollout --executor` runs through :mod:`sparring.distributed.executor`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "sparring"


def _rollout(task_dir: Path, store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"}
    return subprocess.run([str(EXE), "rollout", "--tasks", str(task_dir), "--policy", "oracle", "--group-size", "2",
                           "--store", str(store), "--json", *extra],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip


def test_local_executor_runs_the_rollout_and_stores_every_sample(clamp_task, tmp_path):
    r = _rollout(clamp_task.path, tmp_path / "s.db", "--executor", "local")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requested"] == out["stored"] == 2 and out["statuses"] == {"ok": 2}


@pytest.mark.parametrize(("name", "words"), [("ray", "--executor local"), ("bogus", "unknown executor")])
def test_an_unavailable_executor_is_refused_in_one_line_before_the_store_exists(
    clamp_task, tmp_path, name, words
):
    r = _rollout(clamp_task.path, tmp_path / "s.db", "--executor", name)
    assert r.returncode != 0
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "s.db").exists()
