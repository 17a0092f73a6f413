"""Sandbox lifecycle benchmark: medians and p99 of every operation, in milliseconds."""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.local import LocalBackend
from sparring.sandbox.pool import SandboxPool


def _p(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def _timed(samples: list[float], fn: Callable[[], Awaitable[Any]]) -> Any:
    t = time.perf_counter()
    r = await fn()
    samples.append((time.perf_counter() - t) * 1000)
    return r


def _workspace() -> Path:
    d = Path(tempfile.mkdtemp(prefix="sparring-bench-ws-"))
    (d / "pkg").mkdir()
    for i in range(20):
        (d / "pkg" / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 20)
    return d


async def run_bench(n: int = 20, concurrency: int = 4) -> dict[str, Any]:
    backend = LocalBackend()
    ws = _workspace()
    spec = SandboxSpec(workspace=ws, memory_mb=256, pids=64)
    t: dict[str, list[float]] = {k: [] for k in ("create", "exec", "reset", "snapshot", "restore", "close", "acquire")}
    sem = asyncio.Semaphore(concurrency)
    alive = 0
    max_alive = 0

    async def one(i: int) -> None:
        nonlocal alive, max_alive
        async with sem:
            sb = await _timed(t["create"], lambda: backend.create(spec))
            alive += 1
            max_alive = max(max_alive, alive)
            try:
                await _timed(t["exec"], lambda: sb.exec(["true"]))
                await sb.write_file("pkg/new.py", b"x = 1\n" * 100)
                sid = await _timed(t["snapshot"], sb.snapshot)
                await sb.write_file("pkg/later.py", b"y = 2\n")
                await _timed(t["restore"], lambda: sb.restore(sid))
                await _timed(t["reset"], sb.reset)
            finally:
                await _timed(t["close"], sb.close)
                alive -= 1

    wall = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    pool = SandboxPool(backend, max_idle=concurrency)
    await pool.warm(ws, concurrency)
    for _ in range(n):
        sb = await _timed(t["acquire"], lambda: pool.acquire_spec(SandboxSpec(workspace=ws)))
        await pool.release(sb)
    await pool.close()
    out: dict[str, Any] = {}
    for k, xs in t.items():
        out[f"{k}_ms"] = round(statistics.median(xs), 3) if xs else 0.0
        out[f"{k}_p99_ms"] = round(_p(xs, 0.99), 3)
    out.update(
        max_concurrent=max(max_alive, concurrency),
        n=n,
        concurrency=concurrency,
        mode=backend.mode,
        wall_s=round(time.perf_counter() - wall, 3),
    )
    shutil.rmtree(ws, ignore_errors=True)
    return out
