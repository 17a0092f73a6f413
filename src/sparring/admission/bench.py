"""Admission throughput: how many generated tasks `tasks check` gets through per minute.

Generates a mixed sample (round-robin over the chosen families, fixed seed),
checks it with the real judge in each task's pinned environment layer, and
reports tasks per minute together with the judge runs admission needed and
the machine's load, since on a shared machine the figure depends on it.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sparring.admission.check import REFERENCE_RUNS, check_tasks, default_judge_concurrency, eval_judge_of
from sparring.judge.base import Judge, JudgeResult
from sparring.sandbox.base import SandboxBackend, WorkspaceDiff
from sparring.tasks.environment import layer_for
from sparring.tasks.families import generate, get_family
from sparring.tasks.loader import Task


class _Counting:
    """Counts the judge runs admission makes (a plain wrapper around the real judge)."""

    def __init__(self, inner: Judge) -> None:
        self.inner, self.version, self.runs = inner, inner.version, 0

    async def score(self, task: Task, diff: WorkspaceDiff) -> JudgeResult:
        self.runs += 1
        return await self.inner.score(task, diff)


async def run_admission_bench(
    backend: SandboxBackend,
    n: int,
    families: list[str],
    concurrency: int,
    repeats: int | None,
    seed: int = 0,
    judge_concurrency: int | None = None,
) -> dict[str, Any]:
    for f in families:
        get_family(f)
    counts = {f: n // len(families) + (1 if i < n % len(families) else 0) for i, f in enumerate(families)}
    with tempfile.TemporaryDirectory(prefix="sparring-admission-bench-") as tmp:
        t0 = time.perf_counter()
        tasks: list[Task] = []
        for f, k in counts.items():
            if k:
                tasks += generate(f, k, seed, Path(tmp) / f)
        gen_s = time.perf_counter() - t0
        from sparring.judge.pytest_judge import PytestJudge

        inner = PytestJudge(backend)
        inner_eval = eval_judge_of(inner)
        assert inner_eval is not None
        judge, eval_judge = _Counting(inner), _Counting(inner_eval)
        for t in tasks:
            layer_for(t.spec.environment)  # build layers outside the timed part
        per_task: list[float] = []
        started = time.perf_counter()
        t_last = [started]

        def done(_: object) -> None:
            now = time.perf_counter()
            per_task.append(now - t_last[0])
            t_last[0] = now

        load_before = os.getloadavg()[0]
        jc = judge_concurrency or default_judge_concurrency()
        reports = await check_tasks(
            tasks,
            judge,
            repeats=repeats,
            concurrency=concurrency,
            on_done=done,
            judge_concurrency=jc,
            eval_judge=eval_judge,
        )
        wall = time.perf_counter() - started
    runs = judge.runs + eval_judge.runs
    return {
        "tasks": len(tasks),
        "families": counts,
        "admitted": sum(r.ok for r in reports),
        "rejected": {r.id: [p.rule for p in r.problems] for r in reports if not r.ok},
        "repeats": repeats or REFERENCE_RUNS,
        "concurrency": concurrency,
        "judge_concurrency": jc,
        "seconds": round(wall, 2),
        "tasks_per_minute": round(60 * len(tasks) / wall, 2) if wall else None,
        "judge_runs": runs,
        "judge_runs_per_task": round(runs / max(1, len(tasks)), 2),
        "seconds_between_completions_median": round(statistics.median(per_task), 2) if per_task else None,
        "generate_seconds": round(gen_s, 2),
        "cpus": os.cpu_count(),
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }
