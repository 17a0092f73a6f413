"""Every entry point judges a task in the task's pinned environment layer, never in Sparring's own venv.

The task's hidden suite carries a marker test that passes only in a built layer (its ``sys.prefix``
holds the layer's ``manifest.json``, which Sparring's own virtual environment does not). Judged
anywhere else, the marker fails and the reward is not 1. The positive control shows the marker
really tells the two apart: run in a sandbox of the host's interpreter, it fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from sparring.env import Environment
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.local.backend import LocalBackend
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.environment import layer_for
from sparring.tasks.loader import Task, load_task
from sparring.tasks.sandbox_spec import spec_for_task
from tests_support import FIXED_CLAMP, make_clamp_task

SPARRING = str(Path(sys.executable).parent / "sparring")
MARKER = "test_runs_in_the_pinned_layer"
MARKER_CODE = (
    "import json, os, sys\n"
    "m = json.load(open(os.path.join(sys.prefix, 'manifest.json')))\n"
    "assert m['format'] == 'sparring-env-layer/1', m\n"
)
MARKER_TEST = f"\n\ndef {MARKER}():\n" + "".join(f"    {ln}\n" for ln in MARKER_CODE.splitlines())


def mark(task: Task) -> Task:
    """``task`` with the marker appended to each of its hidden test files (and declared, so it counts)."""
    raw = tomllib.loads((task.path / "task.toml").read_text())
    declared = raw.setdefault("judge", {}).setdefault("hidden_tests", [])
    for f in sorted(task.hidden.rglob("test_*.py")):
        f.write_text(f.read_text() + MARKER_TEST)
        rel = f.relative_to(task.hidden).as_posix()
        if declared and not rel.startswith("eval/"):
            declared.append(f"{rel}::{MARKER}")
    (task.path / "task.toml").write_text(tomli_w.dumps(raw))
    return load_task(task.path)


def cli(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SPARRING, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy())  # fmt: skip


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return mark(make_clamp_task(tmp_path_factory.mktemp("marked") / "tasks" / "clamp-bug"))


def test_positive_control_the_marker_fails_outside_the_layer(task: Task) -> None:
    async def run(spec: SandboxSpec) -> tuple[int, str]:
        sb = await LocalBackend().create(spec)
        try:
            r = await sb.exec(["python", "-c", MARKER_CODE])
            return r.exit_code, r.stdout + r.stderr
        finally:
            await sb.close()

    host_rc, host_out = asyncio.run(run(SandboxSpec(workspace=task.workspace)))
    assert host_rc != 0 and "manifest.json" in host_out  # Sparring's own venv: the marker fails
    layer_rc, layer_out = asyncio.run(run(spec_for_task(task)))
    assert layer_rc == 0, layer_out
    assert spec_for_task(task).environment == layer_for(task.spec.environment).ref()


def test_judge_score_cli(task: Task, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace, ws)
    (ws / "mathx" / "core.py").write_text(FIXED_CLAMP)
    r = cli("judge", "score", "--task", task.path, "--workspace", ws, "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["reward"] == 1.0 and d["tests"]["failed"] == 0, d
    assert d["tests"]["passed"] == 5  # the four hidden tests and the marker


def test_judge_batch_cli(task: Task) -> None:
    r = cli("judge", "batch", "--tasks", task.path.parent, "--reference", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    rewards = [it["reward"] for it in d["results"]] if "results" in d else None
    assert rewards == [1.0], d


def test_rollout_and_replay_cli(task: Task, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    r = cli("rollout", "--tasks", task.path, "--policy", "oracle", "--store", store, "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["reward_mean"] == 1.0, (d, r.stderr[-2000:])
    tid = json.loads(cli("traj", "search", "--json", "--store", store).stdout)["trajectories"][0]["id"]
    r = cli("traj", "replay", tid, "--json", "--store", store, "--tasks", task.path.parent)
    j = json.loads(r.stdout)
    assert r.returncode == 0 and j["reward_replayed"] == 1.0, j


def test_eval_cli(task: Task, tmp_path: Path) -> None:
    r = cli("eval", "--tasks", task.path, "--store", tmp_path / "e.db", "--policy", "oracle", "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["reward_mean"] == 1.0, (d, r.stderr[-2000:])


def test_tasks_check_cli(task: Task) -> None:
    r = cli("tasks", "check", task.path, "--json", "--repeats", "1", "--no-store")
    (item,) = json.loads(r.stdout)["tasks"]
    assert r.returncode == 0 and item["ok"], item


def test_environment_from_task_sync_and_async(task: Task) -> None:
    def solve(env: Environment) -> None:
        call = {
            "name": "write_file",
            "arguments": json.dumps({"path": "mathx/core.py", "content": FIXED_CLAMP}),
        }
        sub = {"name": "submit", "arguments": "{}"}
        for i, fn in enumerate((call, sub)):
            res = env.step({"role": "assistant", "content": "", "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": fn}]})  # fmt: skip
        assert res.terminated and res.reward == 1.0, res.info
        assert res.info["per_test"][f"test_hidden_clamp.py::{MARKER}"] == "passed"

    with Environment.from_task(task.path) as env:
        env.reset(seed=0)
        solve(env)

    async def go() -> float | None:
        env = Environment.from_task(task.path)
        try:
            await env.areset(seed=1)
            call = {
                "name": "write_file",
                "arguments": json.dumps({"path": "mathx/core.py", "content": FIXED_CLAMP}),
            }
            await env.astep({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c0", "type": "function", "function": call}]})  # fmt: skip
            res = await env.astep({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]})  # fmt: skip
            assert res.info["per_test"][f"test_hidden_clamp.py::{MARKER}"] == "passed", res.info
            return res.reward
        finally:
            await env.aclose()

    assert asyncio.run(go()) == 1.0


TRAIN = """
family: shell-ops
n_train: 1
n_heldout: 1
heldout_samples: 1
seed: 3
sft_steps: 1
sft_batch: 1
iterations: 0
tasks_per_iteration: 1
group_size: 2
max_steps: 2
heldout_max_steps: 2
checkpoint_every: 0
model: {hidden: 32, layers: 1, heads: 4, vocab_size: 600, max_new_tokens: 8}
warm_start: {teacher: oracle, samples: 1, passed_only: false}
"""


def test_train_cli(tmp_path: Path) -> None:
    from sparring.tasks.families import generate, get_family

    work = tmp_path / "run"
    root = work / "tasks" / f"shell-ops-v{get_family('shell-ops').version}-s3"
    for name, seed in (("train", 3), ("heldout", 3 + 100_003)):  # what generate_family_tasks reuses
        for t in generate("shell-ops", 1, seed, root / f"{name}-1"):
            mark(t)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(TRAIN + f"workdir: {work}\n")
    r = cli("train", "--config", cfg, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    # iterations 0: no trained weights, and the summary says so instead of passing the base off as trained
    assert json.loads(r.stdout)["trained_model"] is None and "no RL update ran" in r.stderr
    st = SQLiteStore(work / "store.db")
    try:
        _, trajs = st.search(TrajQuery(limit=100))
    finally:
        st.close()
    teacher = [t for t in trajs if t.run_id.endswith("-teacher")]
    assert teacher and all(t.reward == 1.0 for t in teacher), [(t.reward, t.failing_tests) for t in teacher]
    judged = [t for t in trajs if t.reward is not None]
    assert judged and not any(MARKER in f for t in judged for f in t.failing_tests)
