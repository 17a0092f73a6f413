"""Admission checks: a task enters the library only if every rule holds.

Each rule is a small named check; its name is the rejection rule that
``sparring tasks check`` reports (DESIGN.md §8). The rules:

========================  =====================================================
``spec_valid``            task.toml parses and validates (reported by the CLI)
``instruction_specific``  the instruction is present, long enough, no placeholder
``success_criteria_specific``  likewise for the success criteria
``initial_state_reproducible``  the workspace rebuilds (copied as the sandbox
                          layer store imports it) to the digest pinned in
                          task.toml, twice: a tampered workspace is rejected
``hidden_tests_listed``   judge.hidden_tests names the hidden tests
``hidden_tests_present``  hidden/ holds test files
``original_not_reachable``  no VCS history in the workspace, and no workspace
                          file holds the bytes of a file the solution replaces
``initial_state_fails``   the hidden tests do not all pass on the initial state
``judge_deterministic``   the judge gives the initial state the same score twice
``solution_passes``       the reference solution passes every hidden test
``solution_flaky``        ... on every one of N >= 5 runs (any flake rejects)
``regression_kept``       tests passing on the initial state pass with the reference
``hack_<name>_scores_zero``  no-op, deleting the visible tests, hard-coding the
                          visible examples (and family hacks) earn reward 0
``alternative_passes``    every alternative valid solution the family ships passes
``environment_builds``    the pinned environment layer can be built here
========================  =====================================================

Rules that execute score through the real judge in real sandboxes. The result
(:class:`CheckReport`, outcomes included) is stored next to task.toml as
``admission.json`` so that ``sparring tasks regress`` can later tell whether a
changed environment or judge changes the task's outcome.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring.errors import TaskError
from sparring.judge.base import Judge, JudgeResult
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks import hacks
from sparring.tasks.environment import Judges
from sparring.tasks.loader import Task, read_task_record, workspace_digest, write_task_record

PLACEHOLDERS = ("todo", "tbd", "fix it", "fix", "xxx", "lorem ipsum", "do the task", "n/a", "none", "...")
MIN_REPEATS = 5
ADMISSION_FILE = "admission.json"
VCS_DIRS = (".git", ".hg", ".svn", ".bzr")


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
    version: int = 1
    outcomes: dict[str, Any] = field(default_factory=dict)
    """What the judge said: ``initial`` / ``reference`` per-test outcomes and rewards (for regress)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "digest": self.digest,
            "ok": self.ok,
            "problems": [p.to_json() for p in self.problems],
        }


# --------------------------------------------------------------------------- static rules


def check_instruction(task: Task) -> list[Problem]:
    out = []
    s = task.spec
    for name, text, minimum in (
        ("instruction", s.instruction, 40),
        ("success_criteria", s.success_criteria, 20),
    ):
        t = " ".join(text.split())
        if t.lower().strip(" .!") in PLACEHOLDERS:
            out.append(Problem(f"{name}_specific", f"{name} is a placeholder: {t!r}"))
        elif len(t) < minimum or len(t.split()) < 4:
            out.append(
                Problem(
                    f"{name}_specific", f"{name} is too vague ({len(t)} chars, need {minimum} and 4 words)"
                )
            )
    return out


def check_initial_state(task: Task) -> list[Problem]:
    """Rebuild the initial state twice (a copy, as a sandbox layer is made) and compare with the pinned digest."""
    pinned = task.spec.workspace_digest
    if pinned is None:
        return [
            Problem(
                "initial_state_reproducible",
                "task.toml pins no workspace_digest (write tasks with write_task)",
            )
        ]
    with tempfile.TemporaryDirectory(prefix="sparring-admit-") as tmp:
        digests = []
        for i in range(2):
            copy = Path(tmp) / f"build{i}"
            shutil.copytree(task.workspace, copy, symlinks=True)
            digests.append(workspace_digest(copy))
    if len(set(digests)) != 1:
        return [Problem("initial_state_reproducible", f"two builds of the workspace differ: {digests}")]
    if digests[0] != pinned:
        return [
            Problem(
                "initial_state_reproducible",
                f"workspace/ rebuilds to {digests[0][:19]}, but task.toml pins {pinned[:19]}: the workspace was "
                "changed after the task was written",
            )
        ]
    return []


def check_hidden_tests(task: Task) -> list[Problem]:
    if not task.spec.judge.hidden_tests:
        return [Problem("hidden_tests_listed", "judge.hidden_tests is empty: list every hidden test id")]
    if not task.hidden.is_dir() or not any(
        p for p in task.hidden.rglob("*.py") if hacks.is_test_file(p.relative_to(task.hidden).as_posix())
    ):
        return [Problem("hidden_tests_present", "hidden/ holds no test files")]
    return []


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_original_not_reachable(
    task: Task, environment_hashes: frozenset[str] = frozenset()
) -> list[Problem]:
    """The answer must not be readable from the agent's sandbox: no VCS history, no leftover copies.

    ``environment_hashes`` (sha256 of every file of the environment layer) extends the search to the
    environment, where code copied from an installed package would sit.
    """
    out = []
    for d in task.workspace.rglob("*"):
        if d.name in VCS_DIRS:
            out.append(
                Problem(
                    "original_not_reachable",
                    f"workspace holds version-control data: {d.relative_to(task.path)}",
                )
            )
    files, _ = task.solution_files()
    originals = {}
    for rel, data in files.items():
        current = task.workspace / rel
        if current.is_file() and current.read_bytes() == data:
            continue  # unchanged by the solution: not a secret
        if len(data) >= 64:  # tiny answers (a number) can collide by chance
            originals[_sha(data)] = rel
    if originals:
        for p in task.workspace.rglob("*"):
            if p.is_file() and not p.is_symlink() and _sha(p.read_bytes()) in originals:
                rel = originals[_sha(p.read_bytes())]
                out.append(
                    Problem(
                        "original_not_reachable",
                        f"workspace/{p.relative_to(task.workspace)} holds the solution's {rel}",
                    )
                )
        leaked = sorted(rel for h, rel in originals.items() if h in environment_hashes)
        if leaked:
            out.append(
                Problem("original_not_reachable", f"the environment layer holds the solution's {leaked}")
            )
    return out


# --------------------------------------------------------------------------- execution rules


def solution_diff(task: Task) -> WorkspaceDiff:
    files, deleted = task.solution_files()
    return WorkspaceDiff(files=files, deleted=tuple(deleted))


def delete_tests_diff(task: Task) -> WorkspaceDiff:
    return hacks.delete_tests(task)


def _passes(r: JudgeResult) -> bool:
    return r.components.get("all_pass", 0.0) >= 1.0 and not r.flags


def _failing(r: JudgeResult, n: int = 3) -> list[str]:
    return sorted(k for k, v in r.per_test.items() if v != "passed")[:n]


def default_judge_concurrency() -> int:
    """Judge runs in flight at once: two per CPU. Each run is CPU-bound (a sandbox, then pytest): on an
    idle 2-core machine 2, 4 and 8 runs in flight all admit about 47 tasks/min (8 is a few % slower);
    more in flight only helps while other work competes for the CPUs."""
    return 2 * (os.cpu_count() or 1)


async def check_execution(
    task: Task,
    judge: Judge,
    repeats: int,
    report: CheckReport | None = None,
    slots: asyncio.Semaphore | None = None,
) -> list[Problem]:
    """Every execution rule. The judge runs are independent (each in its own fresh sandbox), so they
    all start at once and ``slots`` bounds how many are in flight (shared across tasks by
    :func:`check_tasks`); the verdicts are the same as one after another."""
    out: list[Problem] = []
    sem = slots or asyncio.Semaphore(default_judge_concurrency())

    async def score(diff: WorkspaceDiff) -> JudgeResult:
        async with sem:
            return await judge.score(task, diff)

    task_hacks = hacks.hacks(task)
    alts = hacks.alternatives(task)
    n = max(repeats, 1)
    diffs = [WorkspaceDiff(), WorkspaceDiff()] + [solution_diff(task)] * n
    diffs += [h.diff for h in task_hacks if h.name != "noop"] + [a.diff for a in alts]
    async with asyncio.TaskGroup() as tg:  # a judge error cancels the runs still waiting
        jobs = [tg.create_task(score(d)) for d in diffs]
    results = [j.result() for j in jobs]
    initial, again = results[0], results[1]
    runs = results[2 : 2 + n]
    hack_results = iter(results[2 + n : len(results) - len(alts)])
    alt_results = results[len(results) - len(alts) :]

    if (initial.reward, initial.per_test) != (again.reward, again.per_test):
        out.append(
            Problem(
                "judge_deterministic",
                f"the initial state scored {initial.reward} then {again.reward} "
                f"({sorted(k for k in initial.per_test if initial.per_test[k] != again.per_test.get(k))[:3]})",
            )
        )
    if initial.components.get("all_pass", 0.0) >= 1.0:
        out.append(Problem("initial_state_fails", "every hidden test already passes on the initial state"))

    passed = [_passes(r) for r in runs]
    if not any(passed):
        r = runs[0]
        out.append(
            Problem("solution_passes", f"the reference solution fails {_failing(r)} (flags {r.flags})")
        )
    elif not all(passed):
        bad = next(r for r in runs if not _passes(r))
        out.append(
            Problem(
                "solution_flaky",
                f"the reference solution failed {passed.count(False)} of {len(runs)} runs "
                f"(e.g. {_failing(bad)}): flaky tests are rejected",
            )
        )
    else:
        for r in runs:
            lost = sorted(
                t for t, v in initial.per_test.items() if v == "passed" and r.per_test.get(t) != "passed"
            )
            if lost:
                out.append(
                    Problem(
                        "regression_kept",
                        f"tests passing on the initial state fail with the reference: {lost[:3]}",
                    )
                )
                break

    for hack in task_hacks:
        r = initial if hack.name == "noop" else next(hack_results)
        if r.reward > 0:
            out.append(Problem(f"hack_{hack.name}_scores_zero", f"the {hack.name} hack scores {r.reward}"))
    for alt, r in zip(alts, alt_results, strict=True):
        if not _passes(r):
            out.append(
                Problem(
                    "alternative_passes",
                    f"valid alternative {alt.name!r} fails {_failing(r)}: tests reject a correct answer",
                )
            )

    if report is not None:
        ref = next((r for r in runs if _passes(r)), runs[0])
        report.outcomes = {
            "judge_version": initial.judge_version,
            "initial": {"reward": initial.reward, "per_test": initial.per_test},
            "reference": {"reward": ref.reward, "per_test": ref.per_test, "runs": len(runs)},
        }
    return out


async def check_task(
    task: Task,
    judge: Judge,
    repeats: int = MIN_REPEATS,
    environment_hashes: frozenset[str] = frozenset(),
    slots: asyncio.Semaphore | None = None,
) -> CheckReport:
    rep = CheckReport(task.id, task.digest, version=task.spec.version)
    for check in (check_instruction, check_initial_state, check_hidden_tests):
        rep.problems += check(task)
    rep.problems += check_original_not_reachable(task, environment_hashes)
    if not any(p.rule.startswith("hidden_tests") for p in rep.problems):
        rep.problems += await check_execution(task, judge, repeats, rep, slots)
    return rep


async def check_tasks(
    tasks: list[Task],
    judge: Judge | Judges,
    repeats: int = MIN_REPEATS,
    concurrency: int = 3,
    on_done: Callable[[CheckReport], None] | None = None,
    judge_concurrency: int | None = None,
) -> list[CheckReport]:
    """Check every task; with :class:`Judges`, each task is judged in its own pinned environment layer.

    ``concurrency`` tasks are checked at once; their judge runs share ``judge_concurrency`` slots
    (default :func:`default_judge_concurrency`)."""
    sem = asyncio.Semaphore(concurrency)
    slots = asyncio.Semaphore(judge_concurrency or default_judge_concurrency())

    async def one(t: Task) -> CheckReport:
        async with sem:
            if isinstance(judge, Judges):
                try:
                    j = judge.judge_for(t.spec.environment)
                    hashes = judge.layer_for(t.spec.environment).file_hashes
                except TaskError as e:
                    rep = CheckReport(t.id, t.digest, [Problem("environment_builds", str(e))], t.spec.version)
                else:
                    rep = await check_task(t, j, repeats, hashes, slots)
            else:
                rep = await check_task(t, judge, repeats, slots=slots)
            if on_done is not None:
                on_done(rep)
            return rep

    return list(await asyncio.gather(*(one(t) for t in tasks)))


# --------------------------------------------------------------------------- stored results


def admission_record(rep: CheckReport, repeats: int, environment: str = "") -> dict[str, Any]:
    return {
        **rep.to_json(),
        "version": rep.version,
        "repeats": repeats,
        "environment": environment,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "outcomes": rep.outcomes,
    }


def store_admission(task: Task, record: dict[str, Any]) -> Path:
    """Write admission.json next to task.toml atomically (not part of the digest: it is about the task)."""
    return write_task_record(task, ADMISSION_FILE, record)


def load_admission(task: Task) -> dict[str, Any] | None:
    """The stored admission result, if it is about these exact bytes (same digest)."""
    return read_task_record(task, ADMISSION_FILE)
