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


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--executor", "bogus"), "unknown executor"),
        (("--executor", "local", "--ray-address", "127.0.0.1:1"), "--ray-address needs --executor ray"),
        (("--executor", "ray", "--ray-address", "127.0.0.1:1"), "cannot reach the Ray cluster"),
    ],
)
def test_an_unavailable_executor_is_refused_in_one_line(clamp_task, tmp_path, args, words):
    r = _rollout(clamp_task.path, tmp_path / "s.db", *args)
    assert r.returncode != 0
    assert words in r.stderr and r.stderr.strip().splitlines()[-1].count("error") == 1, r.stderr
    if "unknown" in words or "needs" in words:  # refused before the store exists
        assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "s.db").exists()


@pytest.mark.slow
def test_the_ray_executor_starts_its_own_cluster_when_given_no_address(clamp_task, tmp_path):
    r = _rollout(clamp_task.path, tmp_path / "s.db", "--executor", "ray", "--concurrency", "2")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requested"] == out["stored"] == 2 and out["statuses"] == {"ok": 2}
    assert list(out["nodes"].values()) == [2], out  # one embedded node played both
