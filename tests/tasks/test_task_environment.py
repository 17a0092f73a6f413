"""Agent sandboxes run in the task's pinned environment layer, not in Sparring's own virtual environment.

A real rollout (scheduler, pool, real sandboxes, real judge, real SQLite store) with a scripted policy
that probes its sandbox through the bash tool, then solves the task as the oracle does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sparring.errors import SandboxError, TaskError
from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.base import Action, ActRequest
from sparring.policy.scripted import OraclePolicy, tool_call_message
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.pool import SandboxPool
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.environment import build_layer
from sparring.tasks.families import generate
from sparring.tasks.loader import Task
from sparring.tasks.sandbox_spec import spec_for_task

PROBES = [
    "python -c 'import sparring' 2>&1; echo rc=$?",
    "python -c 'import sys, pytest; print(pytest.__version__, sys.prefix)'",
    "python -c 'import sys; print(sys.executable)'",
]


class ProbingPolicy(OraclePolicy):
    """Runs the probes with the bash tool, then plays the oracle's plan."""

    name = "probe"

    def plan(self, request: ActRequest) -> list[tuple[str, dict[str, Any]]]:
        return [("bash", {"command": c}) for c in PROBES] + super().plan(request)

    async def act(self, request: ActRequest) -> Action:
        plan = self.plan(request)
        i = min(sum(1 for m in request.messages if m.get("role") == "assistant"), len(plan) - 1)
        name, args = plan[i]
        return Action(tool_call_message(name, args, f"call_{i}"))


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return generate("data-analysis", 1, 3, tmp_path_factory.mktemp("envtask"))[0]


def test_agent_sandbox_runs_the_tasks_pinned_layer(task: Task, tmp_path: Path) -> None:
    layer = build_layer(task.spec.environment)
    pins = dict(p.split("==") for p in layer.pins)
    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> Any:
        backend = LocalBackend()
        pool = SandboxPool(backend, max_idle=1)
        try:
            sched = RolloutScheduler(pool, PytestJudge(backend), store, concurrency=1)
            summary = await sched.run([task], ProbingPolicy(), 2)
            return summary, backend
        finally:
            await pool.close()

    summary, backend = asyncio.run(go())
    assert summary.stored == 2 and summary.reward_mean == 1.0  # the judge, in the same layer, passes it
    for t in summary.trajectories:
        out = [s.output for s in t.steps[: len(PROBES)]]
        assert "ModuleNotFoundError: No module named 'sparring'" in out[0] and "rc=1" in out[0]
        version, prefix = out[1].split()[-2:]
        assert version == pins["pytest"] and Path(prefix) == layer.path
        assert out[2].split()[-1] == str(layer.python)
    # the layer is planned once however many sandboxes (agent's and judge's) were made from it
    assert list(backend._runtimes) == [layer.digest]
    store.close()


def test_the_spec_carries_the_layer_and_a_bad_environment_is_one_line(task: Task, tmp_path: Path) -> None:
    layer = build_layer(task.spec.environment)
    assert spec_for_task(task).environment == layer.ref()
    assert SandboxSpec().environment is None  # a spec of no task: the host's interpreter
    from sparring.tasks.environment import layer_for
    from sparring.tasks.spec import Environment

    with pytest.raises(TaskError) as e:
        layer_for(Environment(requirements=["pytest==0.0.1"]))
    assert "pytest==0.0.1" in str(e.value) and "\n" not in str(e.value)
    assert json.loads(
        json.dumps(task.spec.environment.requirements)
    )  # the generated task pins its environment
    assert all("==" in r for r in task.spec.environment.requirements)


def test_a_missing_layer_is_one_line(tmp_path: Path) -> None:
    from sparring.sandbox.base import EnvironmentRef

    ref = EnvironmentRef(digest="sha256:" + "0" * 64, path=tmp_path / "gone")
    with pytest.raises(SandboxError) as e:
        LocalBackend().runtime_for(SandboxSpec(environment=ref))
    assert "no bin/python" in str(e.value) and "\n" not in str(e.value)
