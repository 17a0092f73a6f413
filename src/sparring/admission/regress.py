"""Environment drift: re-run admitted tasks and report those whose outcome changed.

For every task whose stored admission (``admission.json``, same digest) says
it was admitted, the initial state and the reference solution are scored once
more with the *current* judge in the *current* build of the task's pinned
environment. A task is reported when anything differs from what admission
recorded: the per-test outcomes or reward of either run, or the environment
layer's digest (a different interpreter or distribution versions), the host system
under a task without its own image (another OS release, interpreter build or
installed package: named by package), or when the environment can no longer be
built at all.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sparring.errors import TaskError
from sparring.judge.base import Judge
from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.hostenv import current_host_environment, describe_change, load_snapshot
from sparring.tasks.environment import alayer_for
from sparring.tasks.loader import Task, load_admission, solution_diff


@dataclass
class Drift:
    id: str
    version: int
    digest: str
    changes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "version": self.version, "digest": self.digest, "changes": self.changes}


def _diff_outcomes(what: str, old: dict[str, Any], new_reward: float, new_tests: dict[str, str]) -> list[str]:
    out = []
    if old.get("reward") != new_reward:
        out.append(f"{what} reward {old.get('reward')} -> {new_reward}")
    before = old.get("per_test", {})
    for t in sorted(set(before) | set(new_tests)):
        if before.get(t) != new_tests.get(t):
            out.append(f"{what} {t}: {before.get(t)} -> {new_tests.get(t)}")
    return out


def host_changes(then: Any, host_path: bool) -> list[str]:
    """What moved in the host system under a host-path task since its admission recorded ``then``."""
    if not host_path or not isinstance(then, dict) or not then.get("id"):
        return []
    now = current_host_environment()
    if then["id"] == now.id:
        return []
    old = load_snapshot(str(then["id"]))
    if old is None:
        return [f"host system {then.get('os')}, python {then.get('python')}, {then.get('packages')} packages "
                f"-> {now.summary()} (the old package list is not in this machine's cache)"]  # fmt: skip
    return ["host system: " + line for line in describe_change(old, now)]


async def regress_task(task: Task, judge: Judge, record: dict[str, Any]) -> Drift:
    """Judge the task's initial state and reference again (in its pinned layer) and say what moved."""
    drift = Drift(task.id, task.spec.version, task.digest)
    try:
        layer = await alayer_for(task.spec.environment)
    except TaskError as e:
        drift.changes.append(f"environment no longer builds: {e}")
        return drift
    if record.get("environment") and record["environment"] != layer.digest:
        drift.changes.append(f"environment {record['environment'][:19]} -> {layer.digest[:19]}")
    drift.changes += host_changes(record.get("host"), task.spec.environment.image is None)
    outcomes = record.get("outcomes", {})
    initial = await judge.score(task, WorkspaceDiff())
    reference = await judge.score(task, solution_diff(task))
    drift.changes += _diff_outcomes("initial", outcomes.get("initial", {}), initial.reward, initial.per_test)
    drift.changes += _diff_outcomes(
        "reference", outcomes.get("reference", {}), reference.reward, reference.per_test
    )
    if outcomes.get("judge_version") and outcomes["judge_version"] != initial.judge_version:
        drift.changes.append(f"judge {outcomes['judge_version']} -> {initial.judge_version}")
    return drift


async def regress(tasks: list[Task], judge: Judge, concurrency: int = 2) -> tuple[list[Drift], list[Task]]:
    """(one Drift per admitted task, tasks skipped because they have no admission record for their bytes)."""
    sem = asyncio.Semaphore(concurrency)
    admitted: list[tuple[Task, dict[str, Any]]] = []
    skipped: list[Task] = []
    for t in tasks:
        rec = load_admission(t)
        if rec is not None and rec.get("ok"):
            admitted.append((t, rec))
        else:
            skipped.append(t)

    async def one(t: Task, rec: dict[str, Any]) -> Drift:
        async with sem:
            return await regress_task(t, judge, rec)

    return list(await asyncio.gather(*(one(t, r) for t, r in admitted))), skipped
