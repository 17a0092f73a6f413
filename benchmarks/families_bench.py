"""Task-family benchmark: oracle and random reward over N generated tasks, judge time per task, and
admission on a sample; prints one JSON object per family (the README's "Task families" table).

python benchmarks/families_bench.py [--families sql,tool-use] [--n 50] [--seed 0] [--admit 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sparring.admission.check import check_tasks
from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.scripted import OraclePolicy, RandomPolicy
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.pool import SandboxPool
from sparring.tasks.families import generate
from sparring.tasks.loader import Task


async def _rollouts(backend: LocalBackend, tasks: list[Task], policy: Any, group: int) -> list[float]:
    pool = SandboxPool(backend)
    try:
        res = await RolloutScheduler(pool, PytestJudge(backend), None, concurrency=2).run(
            tasks, policy, group
        )
    finally:
        await pool.close()
    return [t.reward if t.reward is not None else float("nan") for t in res.trajectories]


async def _judge_seconds(backend: LocalBackend, tasks: list[Task]) -> list[float]:
    judge = PytestJudge(backend)
    out = []
    for t in tasks:
        files, deleted = t.solution_files()
        start = time.perf_counter()
        await judge.score(t, WorkspaceDiff(files=files, deleted=tuple(deleted)))
        out.append(time.perf_counter() - start)
    return out


def bench(family: str, n: int, seed: int, admit: int, root: Path) -> dict[str, Any]:
    backend = LocalBackend()
    start = time.perf_counter()
    tasks = generate(family, n, seed, root / family)
    gen_s = time.perf_counter() - start
    oracle = asyncio.run(_rollouts(backend, tasks, OraclePolicy(), 1))
    rnd = asyncio.run(_rollouts(backend, tasks, RandomPolicy(), 1))
    judge_s = asyncio.run(_judge_seconds(backend, tasks[: min(10, n)]))
    reports = asyncio.run(check_tasks(tasks[:admit], PytestJudge(backend), repeats=2)) if admit else []
    return {
        "family": family,
        "generated": len(tasks),
        "distinct": len({t.digest for t in tasks}),
        "generate_s": round(gen_s, 2),
        "admission_sample": len(reports),
        "admitted": sum(r.ok for r in reports),
        "oracle_reward_mean": round(statistics.fmean(oracle), 3),
        "oracle_min": min(oracle),
        "random_reward_mean": round(statistics.fmean(rnd), 3),
        "judge_s_median": round(statistics.median(judge_s), 2),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="sql,tool-use")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--admit", type=int, default=10)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="families-bench-") as d:
        for fam in a.families.split(","):
            print(json.dumps(bench(fam, a.n, a.seed, a.admit, Path(d))), flush=True)
