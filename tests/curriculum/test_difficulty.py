"""Measured difficulty: pass rates from a real store of real rollouts, recorded beside the task."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.curriculum.difficulty import DIFFICULTY_FILE, load_difficulty, tier_of, wilson
from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.scripted import OraclePolicy, RandomPolicy
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.pool import SandboxPool
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import Task, load_task, write_task
from tests_support import make_clamp_task

EXE = [sys.executable, "-m", "sparring.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=300, env=dict(os.environ))


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def bump(t: Task, out: Path) -> Task:
    spec = t.spec.model_copy(update={"version": 2, "instruction": t.spec.instruction + " Version two."})
    ws = {
        p.relative_to(t.workspace).as_posix(): p.read_bytes() for p in t.workspace.rglob("*") if p.is_file()
    }
    hidden = {p.relative_to(t.hidden).as_posix(): p.read_bytes() for p in t.hidden.rglob("*") if p.is_file()}
    return write_task(out, spec, ws, hidden, dict(t.solution_files()[0]))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Task, Task]:
    """A store holding 3 oracle (pass) and 3 random (fail) rollouts of one task version; a second
    version of the same task id was never played."""
    root = tmp_path_factory.mktemp("difficulty")
    task = make_clamp_task(root / "tasks" / "v1")
    other = bump(task, root / "tasks" / "v2")
    store_path = root / "store.db"
    store = SQLiteStore(store_path)

    async def go() -> None:
        backend = LocalBackend()
        pool = SandboxPool(backend, max_idle=2)
        try:
            for pol in (OraclePolicy(), RandomPolicy()):
                sched = RolloutScheduler(pool, PytestJudge(backend), store, concurrency=2, max_steps=6)
                await sched.run([task], pol, 3)
        finally:
            await pool.close()

    asyncio.run(go())
    store.close()
    return store_path, task, other


def test_tiers_and_interval() -> None:
    assert [tier_of(p) for p in (1.0, 0.9, 0.7, 0.5, 0.3, 0.1, 0.0)] == [1, 1, 2, 3, 4, 5, 5]
    assert tier_of(0.6) == 3 and tier_of(0.8) == 2  # boundaries belong to the harder tier
    lo, hi = wilson(3, 6)
    assert lo < 0.5 < hi and wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        tier_of(1.5)


def test_difficulty_is_measured_and_recorded_outside_the_digest(played: tuple[Path, Task, Task]) -> None:
    store_path, task, other = played
    tasks_dir = task.path.parent
    r = cli("tasks", "difficulty", str(tasks_dir), "--from-store", str(store_path), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    by_version = {x["version"]: x for x in out["results"]}
    v1 = by_version[1]
    assert (v1["rollouts"], v1["passes"], v1["pass_rate"], v1["measured_tier"]) == (6, 3, 0.5, 3)
    assert v1["generator_tier"] == task.spec.difficulty and v1["policies"] == ["oracle", "random"]
    assert by_version[2]["rollouts"] == 0 and by_version[2]["measured_tier"] is None  # other digest: unplayed
    # Recorded beside task.toml; the task's digest (its content) is unchanged.
    assert load_task(task.path).digest == task.digest
    rec = load_difficulty(task)
    assert rec is not None and rec["measured_tier"] == 3 and rec["digest"] == task.digest
    assert not (other.path / DIFFICULTY_FILE).exists()
    rows = {
        x["version"]: x for x in json.loads(cli("tasks", "list", str(tasks_dir), "--json").stdout)["tasks"]
    }
    assert (rows[1]["measured_tier"], rows[1]["pass_rate"], rows[1]["difficulty"]) == (
        3,
        0.5,
        task.spec.difficulty,
    )
    assert rows[2]["measured_tier"] is None

    # One policy only (dry run: nothing written); too few rollouts: a pass rate, no tier.
    before = snapshot(tasks_dir)
    r = cli("tasks", "difficulty", str(task.path), "--from-store", str(store_path), "--policy", "oracle",
            "--dry-run", "--json")  # fmt: skip
    (only,) = json.loads(r.stdout)["results"]
    assert (only["rollouts"], only["pass_rate"], only["measured_tier"]) == (3, 1.0, None)
    r = cli("tasks", "difficulty", str(task.path), "--from-store", str(store_path), "--policy", "oracle",
            "--min-rollouts", "3", "--dry-run", "--json")  # fmt: skip
    assert json.loads(r.stdout)["results"][0]["measured_tier"] == 1
    assert snapshot(tasks_dir) == before


def test_stale_record_is_ignored_and_bad_input_is_one_line(
    played: tuple[Path, Task, Task], tmp_path: Path
) -> None:
    store_path, task, _ = played
    rec = (
        json.loads((task.path / DIFFICULTY_FILE).read_text())
        if (task.path / DIFFICULTY_FILE).exists()
        else None
    )
    stale = tmp_path / "stale"
    (stale / "workspace").mkdir(parents=True)
    t = make_clamp_task(stale)
    (t.path / DIFFICULTY_FILE).write_text(json.dumps({"digest": "sha256:" + "0" * 64, "measured_tier": 1}))
    assert load_difficulty(t) is None
    before = snapshot(tmp_path)
    for args in (
        ["tasks", "difficulty", str(t.path), "--from-store", str(tmp_path / "no.db")],
        ["tasks", "difficulty", str(tmp_path / "missing"), "--from-store", str(store_path)],
        ["tasks", "difficulty", str(t.path), "--from-store", str(store_path), "--min-rollouts", "0"],
    ):
        r = cli(*args)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode != 0 and len(lines) == 1, r.stderr
    assert snapshot(tmp_path) == before
    if rec is not None:
        assert json.loads((task.path / DIFFICULTY_FILE).read_text()) == rec
