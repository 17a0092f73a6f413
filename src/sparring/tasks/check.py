"""Admission checks: a task enters the library only if every rule holds.

Each rule is a small named check (its name is the rejection rule reported by
``sparring tasks check``). Rules that need execution score through the real
judge in real sandboxes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sparring.judge.base import Judge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.loader import Task, load_task

PLACEHOLDERS = ("todo", "tbd", "fix it", "xxx", "lorem ipsum")


@dataclass
class Problem:
    rule: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "detail": self.detail}


@dataclass
class CheckReport:
    id: str
    digest: str
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "digest": self.digest, "ok": self.ok, "problems": [p.to_json() for p in self.problems]}


def check_instruction(task: Task) -> list[Problem]:
    out = []
    s = task.spec
    for name, text, minimum in (("instruction", s.instruction, 40), ("success_criteria", s.success_criteria, 20)):
        t = text.strip()
        if len(t) < minimum or t.lower() in PLACEHOLDERS:
            out.append(Problem(f"{name}_specific", f"{name} is too short or a placeholder ({len(t)} chars, need {minimum})"))
    return out


def check_digest_stable(task: Task) -> list[Problem]:
    # load_task rebuilds the digest from the bytes on disk; a second load must agree with the first.
    if load_task(task.path).digest != task.digest:
        return [Problem("digest_stable", "rebuilding the task gives a different digest")]
    return []


def check_hidden_tests(task: Task) -> list[Problem]:
    if not task.spec.judge.hidden_tests:
        return [Problem("hidden_tests_listed", "judge.hidden_tests is empty: list every hidden test id")]
    if not task.hidden.is_dir() or not any(task.hidden.rglob("test*.py")):
        return [Problem("hidden_tests_present", "hidden/ holds no test files")]
    return []


def solution_diff(task: Task) -> WorkspaceDiff:
    files, deleted = task.solution_files()
    return WorkspaceDiff(files=files, deleted=tuple(deleted))


def delete_tests_diff(task: Task) -> WorkspaceDiff:
    tests = sorted(p.relative_to(task.workspace).as_posix() for p in task.workspace.rglob("test*.py"))
    return WorkspaceDiff(deleted=tuple(tests))


async def check_execution(task: Task, judge: Judge, repeats: int) -> list[Problem]:
    out: list[Problem] = []
    initial = await judge.score(task, WorkspaceDiff())
    if initial.components.get("all_pass", 0.0) >= 1.0 or initial.reward > 0:
        out.append(Problem("initial_state_fails", f"hidden tests pass on the initial state (reward {initial.reward})"))
    rewards = []
    for i in range(repeats):
        r = await judge.score(task, solution_diff(task))
        rewards.append(r.reward)
        if r.components.get("all_pass", 0.0) < 1.0:
            failing = sorted(k for k, v in r.per_test.items() if v != "passed")[:3]
            out.append(Problem("solution_passes", f"reference solution failed on run {i + 1}/{repeats}: {failing}"))
            break
    if len(set(rewards)) > 1:
        out.append(Problem("judge_deterministic", f"the same solution scored {sorted(set(rewards))}"))
    hack = await judge.score(task, delete_tests_diff(task))
    if hack.reward > 0:
        out.append(Problem("hack_delete_tests_scores_zero", f"deleting the visible tests scores {hack.reward}"))
    return out


async def check_task(task: Task, judge: Judge, repeats: int = 3) -> CheckReport:
    rep = CheckReport(task.id, task.digest)
    for check in (check_instruction, check_digest_stable, check_hidden_tests):
        rep.problems += check(task)
    if not any(p.rule.startswith("hidden_tests") for p in rep.problems):
        rep.problems += await check_execution(task, judge, repeats)
    return rep


async def check_tasks(tasks: list[Task], judge: Judge, repeats: int = 3, concurrency: int = 2) -> list[CheckReport]:
    sem = asyncio.Semaphore(concurrency)

    async def one(t: Task) -> CheckReport:
        async with sem:
            return await check_task(t, judge, repeats)

    return list(await asyncio.gather(*(one(t) for t in tasks)))
