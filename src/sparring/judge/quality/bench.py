"""Judge benchmark: the judge's overhead over running the same hidden tests bare, and throughput.

*Bare*: a fresh sandbox over the task's initial workspace with the task's limits
(memory, pids, CPU: the same cgroups the judge's sandbox gets), the reference diff
written, hidden/ mounted, ``python -m pytest /judge/hidden -q`` and nothing
else (trusting its exit code). *Judge*: :meth:`PytestJudge.score` on the same
diff, measured as ``full`` (regression tests, dynamic tests, static checks) and
``core`` (hidden tests only, still with every isolation measure), both on a fresh
sandbox per judgement (the old path), and ``warm``: the full judgement on a
:class:`JudgePool`, whose sandboxes are reset between judgements and whose
launcher is prestarted (pytest imported, configured and its session started) while
the sandbox waits, the per-node
floor the judge runs at in training (its first judgement per task, which makes
the pool's sandboxes and the reference's trace, is left out of the median).
Runs are interleaved task by task in the same process, so load affects all
alike; the warm path's verdicts are compared with the fresh path's.
Throughput: a batch of workspaces judged with bounded concurrency, once with
a fresh sandbox per judgement and once on a warm pool (:class:`JudgePool`:
sandboxes of a task reused with a full reset between judgements), in turn, on
the same batch; the two paths' verdicts are compared workspace by workspace.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.judge.runner.sandbox import JudgePool, apply_diff
from sparring.sandbox.base import SandboxBackend, SandboxSpec, WorkspaceDiff
from sparring.tasks.loader import Task, solution_diff


async def bare_run(backend: SandboxBackend, task: Task) -> tuple[float, bool]:
    t0 = time.perf_counter()
    lim = task.spec.limits
    spec = SandboxSpec(workspace=task.workspace, extra_ro={"/judge/hidden": task.hidden}, memory_mb=lim.memory_mb,
                       pids=lim.pids, cpus=lim.cpus, disk_mb=max(lim.disk_mb, 64),
                       env={"PYTHONPATH": "/workspace"})  # fmt: skip
    sb = await backend.create(spec)
    try:
        await apply_diff(sb, solution_diff(task))
        r = await sb.exec(["python", "-m", "pytest", "/judge/hidden", "-q", "-p", "no:cacheprovider"],
                          timeout=task.spec.judge.timeout_s)  # fmt: skip
    finally:
        await sb.close()
    return time.perf_counter() - t0, r.exit_code == 0


def _med(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1000, 1) if xs else 0.0


async def run_bench(backend: SandboxBackend, tasks: list[Task], repeats: int = 3, batch: int = 12,
                    concurrency: int = 2) -> dict[str, Any]:  # fmt: skip
    full = PytestJudge(backend)
    core = PytestJudge(backend, config=JudgeConfig(regression=False, dynamic=False))
    bare_s: list[float] = []
    full_s: list[float] = []
    core_s: list[float] = []
    warm_s: list[float] = []
    agree = warm_agree = 0
    warm_pool = JudgePool(backend, max_idle=2)
    warm = PytestJudge(backend, pool=warm_pool)
    try:
        for t in tasks:  # the pool's first judgement per task: its sandboxes and the reference's trace
            await warm.score(t, solution_diff(t))
        for _ in range(repeats):
            for t in tasks:
                s, ok = await bare_run(backend, t)
                bare_s.append(s)
                t0 = time.perf_counter()
                r = await full.score(t, solution_diff(t))
                full_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await core.score(t, solution_diff(t))
                core_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                wr = await warm.score(t, solution_diff(t))
                warm_s.append(time.perf_counter() - t0)
                agree += int(ok == (r.components.get("all_pass", 0.0) >= 1.0))
                warm_agree += int(wr.reward == r.reward and wr.flags == r.flags)
        warm_launches, warm_enabled = warm_pool.warm_launches, warm_pool.enabled
    finally:
        await warm_pool.close()
    sem = asyncio.Semaphore(concurrency)
    jobs = [tasks[i % len(tasks)] for i in range(batch)]
    seed = JudgeConfig(dynamic_seed=1, shuffle_seed=1)

    async def one(judge: PytestJudge, t: Task, i: int) -> float:
        # even items: the reference; odd items: the initial state (so verdicts differ within a batch)
        async with sem:
            return (await judge.score(t, solution_diff(t) if i % 2 == 0 else WorkspaceDiff())).reward

    async def run_batch(judge: PytestJudge) -> tuple[float, list[float]]:
        t0 = time.perf_counter()
        rewards = await asyncio.gather(*(one(judge, t, i) for i, t in enumerate(jobs)))
        return time.perf_counter() - t0, list(rewards)

    # Fresh and pooled batches alternate (fresh, pooled, fresh, pooled), so load drifts hit both alike;
    # each pooled round starts from an empty pool (its sandbox creations are counted).
    wall = pool_wall = 0.0
    pool_agree = 0
    pool_alive = 0
    enabled = False
    for _ in range(2):
        w, fresh_rewards = await run_batch(PytestJudge(backend, config=seed))
        wall += w
        pool = JudgePool(backend, max_idle=2)
        try:
            w, pool_rewards = await run_batch(PytestJudge(backend, config=seed, pool=pool))
            pool_wall += w
            pool_alive, enabled = max(pool_alive, pool.max_alive), pool.enabled
        finally:
            await pool.close()
        pool_agree += sum(1 for a, b in zip(fresh_rewards, pool_rewards, strict=True) if a == b)
    batch *= 2
    b, f, c = statistics.median(bare_s), statistics.median(full_s), statistics.median(core_s)
    wm = statistics.median(warm_s)
    return {
        "judge_version": full.version,
        "tasks": len(tasks),
        "repeats": repeats,
        "bare_ms": _med(bare_s),
        "judge_core_ms": _med(core_s),
        "judge_full_ms": _med(full_s),
        "overhead_core": round(c / b, 3) if b else None,
        "overhead_full": round(f / b, 3) if b else None,
        "target_overhead": 1.5,
        "verdicts_agree": agree,
        "warm": {
            "enabled": warm_enabled,
            "judge_full_ms": _med(warm_s),
            "overhead_full": round(wm / b, 3) if b else None,
            "target_overhead": 0.5,
            "prestarted_launchers_used": warm_launches,
            "verdicts_agree_with_fresh": warm_agree,
            "judgements": len(warm_s),
        },
        "batch": batch,
        "concurrency": concurrency,
        "batch_seconds": round(wall, 3),
        "workspaces_per_minute": round(batch / wall * 60, 1) if wall else 0.0,
        "pool": {
            "enabled": enabled,
            "batch_seconds": round(pool_wall, 3),
            "workspaces_per_minute": round(batch / pool_wall * 60, 1) if pool_wall else 0.0,
            "speedup": round(wall / pool_wall, 3) if pool_wall else None,
            "sandboxes_alive_max": pool_alive,
            "verdicts_agree": pool_agree,
        },
    }


def bench_tasks(out: Path, n: int) -> list[Task]:
    from sparring.tasks.families import generate

    half = max(1, n // 2)
    return generate("code-repair", half, 1, out / "cr") + generate(
        "function-impl", max(1, n - half), 1, out / "fi"
    )
