"""The golden set: frozen (task, workspace, expected verdict) cases replayed by ``sparring judge regress``.

``golden.json`` holds everything a case needs, frozen: each task's files (an
embedded file map of task.toml, workspace/, hidden/ and solution/, checked
against the task digest recorded with it) and each case's workspace diff (the
reference solution, the initial state, every red-team hack, and the hacks and
alternatives a task ships for admission). Replaying writes the frozen tasks to
a temporary directory and never calls a generator or the red-team catalogue, so
a generator change cannot move the set: only a judge change can. A verdict is
the deterministic part of a result: reward, flags, correctness and static
components, per-test outcomes. Seeds of the judge itself are pinned, so a
regress run is reproducible.

Any difference fails the run. ``--update`` re-records the verdicts (with the new
judge version) on the same frozen inputs, after a person has checked that the
change is intended; ``--rebuild`` regenerates the inputs themselves from the
generators (:data:`GOLDEN_TASKS`) and the red-team catalogue, and is the only
way the inputs change.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sparring import atomicfile
from sparring.errors import ConfigError, TaskError
from sparring.judge.base import JudgeRunError
from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.sandbox.base import SandboxBackend, WorkspaceDiff
from sparring.tasks import taskfs
from sparring.tasks.attacks import HACKS
from sparring.tasks.loader import Task, load_task, relative_name, solution_diff

FORMAT = 2
GOLDEN_TASKS: tuple[tuple[str, int, int], ...] = (("code-repair", 2, 1), ("function-impl", 1, 1))
"""(family, n, seed) generated for the golden set by ``--rebuild``."""
VERDICT_COMPONENTS = ("all_pass", "pass_fraction", "hidden_fraction", "regression", "dynamic", "compiles", "lint",
                      "diff_size", "complexity")  # fmt: skip
GOLDEN_CONFIG = JudgeConfig(dynamic_seed=0, shuffle_seed=0)
SKIP_FILES = frozenset({"admission.json"})
"""Files of a task directory that are about the task, not part of it (not frozen)."""


@dataclass(frozen=True)
class Case:
    """One golden case: a frozen task and a frozen workspace diff."""

    task: Task
    workspace: str
    diff: WorkspaceDiff


def golden_path() -> Path:
    return Path(str(resources.files("sparring.judge.quality").joinpath("golden.json")))


def workspaces(task: Task) -> dict[str, WorkspaceDiff]:
    """The workspaces a task contributes when the set is rebuilt."""
    from sparring.tasks.attacks import ADMISSION_DIR, overlay_diff

    out: dict[str, WorkspaceDiff] = {"reference": solution_diff(task), "initial": WorkspaceDiff()}
    out.update({f"hack:{k}": make(task) for k, make in sorted(HACKS.items())})
    for kind, prefix in (("hacks", "admission-hack"), ("alternatives", "alternative")):
        root = task.hidden / ADMISSION_DIR / kind
        if not taskfs.is_dir(task.hidden, f"{ADMISSION_DIR}/{kind}"):  # no link on the way
            continue
        names = sorted({e.rel.split("/", 1)[0] for e, _ in taskfs.walk(root) if e.kind == "dir"})
        out.update({f"{prefix}:{n}": overlay_diff(root / n) for n in names})
    return out


def expected_reward(workspace: str) -> float:
    """Full for the reference and a shipped valid alternative, zero for the initial state and every hack."""
    return 1.0 if workspace == "reference" or workspace.startswith("alternative:") else 0.0


def build_tasks(out: Path) -> list[Task]:
    """Generate the golden tasks afresh (``--rebuild`` only)."""
    from sparring.tasks.families import generate

    tasks: list[Task] = []
    for family, n, seed in GOLDEN_TASKS:
        tasks += generate(family, n, seed, out / f"{family}-{seed}")
    return tasks


def fresh_cases(out: Path) -> list[Case]:
    return [Case(t, name, diff) for t in build_tasks(out) for name, diff in workspaces(t).items()]


def task_files(task: Task) -> dict[str, Any]:
    """A task directory as an embedded file map (the encoding of :meth:`WorkspaceDiff.to_json`)."""
    files = taskfs.files(task.path, lambda rel: rel not in SKIP_FILES)  # regular files, no link read through
    enc: dict[str, Any] = WorkspaceDiff(files=files).to_json()["files"]  # type: ignore[assignment]
    return enc


def _safe(rel: str) -> str:
    try:
        return relative_name(rel)
    except TaskError:
        raise ConfigError(f"golden set: unsafe path {rel!r} in a frozen task") from None


def materialize(golden: dict[str, Any], out: Path) -> dict[str, Task]:
    """Write the golden set's frozen tasks under ``out``; ConfigError if one no longer has its digest."""
    if golden.get("format") != FORMAT or not isinstance(golden.get("tasks"), dict):
        raise ConfigError(
            f"golden set has no frozen tasks (format {golden.get('format')!r}, want {FORMAT}): "
            "re-create it with `sparring judge regress --rebuild`"
        )
    tasks: dict[str, Task] = {}
    for tid, entry in sorted(golden["tasks"].items()):
        d = out / _safe(tid)
        for rel, data in WorkspaceDiff.from_json({"files": entry["files"]}).files.items():
            f = d / _safe(rel)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
        task = load_task(d)
        if task.id != tid or task.digest != entry["digest"]:
            raise ConfigError(
                f"golden task {tid}: its frozen files give {task.id} {task.digest[:19]}…, "
                f"recorded {entry['digest'][:19]}… (the golden file was edited by hand?)"
            )
        tasks[tid] = task
    return tasks


def frozen_cases(golden: dict[str, Any], out: Path) -> list[Case]:
    """Every case of the golden set on its frozen task and frozen diff; no generator runs."""
    tasks = materialize(golden, out)
    cases = []
    for c in golden.get("cases", []):
        if c["task"] not in tasks:
            raise ConfigError(f"golden case {c['task']} {c['workspace']}: its task is not frozen in the set")
        cases.append(Case(tasks[c["task"]], c["workspace"], WorkspaceDiff.from_json(c["diff"])))
    return cases


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
    inputs: list[Case] = field(default_factory=list)

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


async def replay(backend: SandboxBackend, cases: list[Case], golden: dict[str, Any] | None, concurrency: int = 2,
                 on_case: Callable[[str], None] | None = None) -> RegressReport:  # fmt: skip
    """Judge every case and compare with ``golden`` (None: just compute)."""
    judge = PytestJudge(backend, config=GOLDEN_CONFIG)
    sem = asyncio.Semaphore(concurrency)
    expected = {(c["task"], c["workspace"]): c for c in (golden or {}).get("cases", [])}

    async def one(case: Case) -> dict[str, Any]:
        async with sem:
            try:
                v = verdict(await judge.score(case.task, case.diff))
            except JudgeRunError as e:
                v = {"status": "judge_error", "reason": e.reason}
        if on_case:
            on_case(f"{case.task.id} {case.workspace}")
        return {"task": case.task.id, "digest": case.task.digest, "workspace": case.workspace, "verdict": v}

    results = list(await asyncio.gather(*(one(c) for c in cases)))
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
        inputs=list(cases),
    )


def golden_data(rep: RegressReport) -> dict[str, Any]:
    """The golden file's content: frozen tasks, frozen diffs and the verdicts this judge gave them."""
    tasks = {c.task.id: c.task for c in rep.inputs}
    diffs = {(c.task.id, c.workspace): c.diff.to_json() for c in rep.inputs}
    cases = [{**r, "diff": diffs[(r["task"], r["workspace"])]} for r in rep.results]
    return {
        "format": FORMAT,
        "judge_version": rep.judge_version,
        "tasks": {tid: {"digest": t.digest, "family": t.spec.family, "files": task_files(t)}
                  for tid, t in sorted(tasks.items())},
        "cases": sorted(cases, key=lambda c: (c["task"], c["workspace"])),
    }  # fmt: skip


def write_golden(path: Path, rep: RegressReport) -> None:
    atomicfile.write_text(path, json.dumps(golden_data(rep), indent=1, sort_keys=True) + "\n")


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
