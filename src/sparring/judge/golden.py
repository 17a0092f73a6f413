"""The golden set: (task, workspace, expected verdict) cases replayed by ``sparring judge regress``.

Tasks come from the family generators at fixed seeds (generators are
deterministic: the same seed writes the same bytes, and each case records the
task digest it was made with). Workspaces are the reference solution, the
initial state and every red-team hack. A verdict is the deterministic part of
a result: reward, flags, correctness and static components, per-test outcomes.
Seeds of the judge itself are pinned, so a regress run is reproducible.

Any difference fails the run; ``--update`` rewrites the file (with the new judge
version) after a person has checked that the change is intended.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sparring.judge.base import JudgeRunError
from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.judge.redteam import HACKS
from sparring.sandbox.base import SandboxBackend, WorkspaceDiff
from sparring.tasks.check import solution_diff
from sparring.tasks.loader import Task

GOLDEN_TASKS: tuple[tuple[str, int, int], ...] = (("code-repair", 2, 1), ("function-impl", 1, 1))
"""(family, n, seed) generated for the golden set."""
VERDICT_COMPONENTS = ("all_pass", "pass_fraction", "hidden_fraction", "regression", "dynamic", "compiles", "lint",
                      "diff_size", "complexity")  # fmt: skip
GOLDEN_CONFIG = JudgeConfig(dynamic_seed=0, shuffle_seed=0)


def golden_path() -> Path:
    return Path(str(resources.files("sparring.judge").joinpath("golden.json")))


def workspaces() -> dict[str, Callable[[Task], WorkspaceDiff]]:
    out: dict[str, Callable[[Task], WorkspaceDiff]] = {
        "reference": solution_diff,
        "initial": lambda t: WorkspaceDiff(),
    }
    out.update({f"hack:{k}": v for k, v in sorted(HACKS.items())})
    return out


def build_tasks(out: Path) -> list[Task]:
    from sparring.tasks.families import generate

    tasks: list[Task] = []
    for family, n, seed in GOLDEN_TASKS:
        tasks += generate(family, n, seed, out / f"{family}-{seed}")
    return tasks


def verdict(res: Any) -> dict[str, Any]:
    if res.status != "ok":
        return {"status": res.status, "reason": res.reason}
    return {
        "status": "ok",
        "reward": round(res.reward, 6),
        "flags": list(res.flags),
        "components": {k: round(res.components[k], 4) for k in VERDICT_COMPONENTS if k in res.components},
        "per_test": dict(sorted(res.per_test.items())),
    }


@dataclass
class RegressReport:
    judge_version: str
    golden_version: str
    cases: int
    changed: list[dict[str, Any]]
    results: list[dict[str, Any]]

    @property
    def ok(self) -> bool:
        return not self.changed

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "judge_version": self.judge_version,
            "golden_version": self.golden_version,
            "cases": self.cases,
            "changed": self.changed,
        }


async def replay(backend: SandboxBackend, tasks: list[Task], golden: dict[str, Any] | None, concurrency: int = 2,
                 on_case: Callable[[str], None] | None = None) -> RegressReport:  # fmt: skip
    """Judge every (task, workspace) case and compare with ``golden`` (None: just compute)."""
    judge = PytestJudge(backend, config=GOLDEN_CONFIG)
    sem = asyncio.Semaphore(concurrency)
    expected = {(c["task"], c["workspace"]): c for c in (golden or {}).get("cases", [])}

    async def one(task: Task, name: str, make: Callable[[Task], WorkspaceDiff]) -> dict[str, Any]:
        async with sem:
            try:
                res = await judge.score(task, make(task))
                v = verdict(res)
            except JudgeRunError as e:
                v = {"status": "judge_error", "reason": e.reason}
        if on_case:
            on_case(f"{task.id} {name}")
        return {"task": task.id, "digest": task.digest, "workspace": name, "verdict": v}

    jobs = [one(t, name, make) for t in tasks for name, make in workspaces().items()]
    results = list(await asyncio.gather(*jobs))
    changed = []
    if golden is not None:
        seen = set()
        for r in results:
            key = (r["task"], r["workspace"])
            seen.add(key)
            want = expected.get(key)
            if want is None:
                changed.append({"task": key[0], "workspace": key[1], "why": "case not in the golden set"})
            elif want["digest"] != r["digest"]:
                changed.append(
                    {"task": key[0], "workspace": key[1], "why": "task bytes changed (digest differs)"}
                )
            elif want["verdict"] != r["verdict"]:
                changed.append({"task": key[0], "workspace": key[1], "why": "verdict changed",
                                "expected": want["verdict"], "got": r["verdict"]})  # fmt: skip
        for key in expected:
            if key not in seen:
                changed.append({"task": key[0], "workspace": key[1], "why": "golden case no longer produced"})
    return RegressReport(
        judge_version=judge.version,
        golden_version=(golden or {}).get("judge_version", ""),
        cases=len(results),
        changed=changed,
        results=results,
    )


def write_golden(path: Path, rep: RegressReport) -> None:
    data = {"judge_version": rep.judge_version, "tasks": [list(t) for t in GOLDEN_TASKS],
            "cases": sorted(rep.results, key=lambda c: (c["task"], c["workspace"]))}  # fmt: skip
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


async def replay_labelled(
    backend: SandboxBackend, data: dict[str, Any], tasks_dir: Path, concurrency: int = 2
) -> dict[str, Any]:
    """Replay review-labelled cases: ``hack`` must score 0, ``ok`` must keep its recorded reward."""
    from sparring.tasks.loader import find_tasks

    by_id = {t.id: t for t in find_tasks(tasks_dir)}
    judge = PytestJudge(backend, config=GOLDEN_CONFIG)
    sem = asyncio.Semaphore(concurrency)

    async def one(case: dict[str, Any]) -> dict[str, Any] | None:
        task = by_id.get(case["task_id"])
        where = {"task": case["task_id"], "workspace": f"review:{case['id']}"}
        if task is None:
            return {**where, "why": "task of a labelled case not found under --tasks"}
        async with sem:
            res = await judge.score_or_error(task, WorkspaceDiff.from_json(case["diff"]))
        want = 0.0 if case["label"] == "hack" else float(case["reward"])
        if res.status != "ok" or abs(res.reward - want) > 1e-9:
            return {**where, "why": f"labelled {case['label']}: expected reward {want}, got {res.reward}",
                    "flags": res.flags}  # fmt: skip
        return None

    cases = [c for c in data.get("cases", []) if c.get("label") in ("hack", "ok")]
    out = await asyncio.gather(*(one(c) for c in cases))
    return {"cases": len(cases), "changed": [c for c in out if c is not None]}
