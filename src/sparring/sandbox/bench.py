"""Sandbox lifecycle benchmark: medians and p99 of every operation, in milliseconds.

One *cycle* per sandbox: cold ``create``; ``execs`` round trips of ``true``;
``changed`` files written, then ``snapshot``; one more write, then
``restore``; ``reset``; ``close``. The workspace has ``files`` files (the
issue's target case: 1,000 files with 10 changed). ``acquire`` is measured on
a warm pool. ``--alive N`` also holds N sandboxes alive at once, runs a
command in each, and reports the memory they take.

Creates come from a pre-fork pool of ``--prefork`` sandboxes per shape
(prefork.py; default 2): the headline keys (``create_ms``, ``cycle_ms``, ...)
measure that path, and the same run measures the cold path, each create making
its sandbox from nothing, under ``cold_*``. A create is timed from the call to
a sandbox that runs commands; refills run in the background on the same event
loop, so they slow what runs meanwhile (``exec_ms``, ``cycle_ms``), and a create
that finds the pool empty is cold and counted (``prefork_misses``).
``burst_create_ms`` makes ``n`` sandboxes back to back without closing any (the
pool serves its first few), ``sustained_creates_per_s`` creates, runs ``true``
and closes ``n`` times in a row; ``prefork_idle_rss_*`` is what the waiting pool
holds. ``alone_reset_ms`` and ``alone_exec_ms`` are one sandbox's reset (after a
command that wrote a file) and exec with nothing else in flight: what the
operation itself costs. ``--podman`` measures the
same create + exec + close cycle through podman in the same run and prints
the ratio.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation import tuning
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.local.sandbox import LocalSandbox
from sparring.sandbox.pool import SandboxPool

OPS = ("acquire", "create", "exec", "reset", "snapshot", "restore", "close", "cycle")
DEFAULT_BENCH_PREFORK = 2


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


def make_workspace(files: int) -> Path:
    d = Path(tempfile.mkdtemp(prefix="sparring-bench-ws-"))
    for i in range(files):
        sub = d / f"pkg{i % 25}"
        sub.mkdir(exist_ok=True)
        (sub / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 5)
    return d


def _rss_kb(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _tree_rss_kb(pid: int) -> int:
    """RSS of a process and its descendants (bubblewrap, the server, what runs in the sandbox)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += _rss_kb(p)
        with contextlib.suppress(OSError):
            stack += [int(x) for x in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
    return total


async def _hold_alive(backend: LocalBackend, spec: SandboxSpec, n: int, concurrency: int) -> dict[str, Any]:
    sem = asyncio.Semaphore(concurrency)
    alive: list[LocalSandbox] = []

    async def one() -> None:
        async with sem:
            sb = await backend.create(spec)
            alive.append(sb)
            await sb.exec(["true"])

    t = time.perf_counter()
    try:
        await asyncio.gather(*(one() for _ in range(n)))
        ok = sum([(await sb.exec(["echo", "alive"])).stdout == "alive\n" for sb in alive])
        rss = sum(_tree_rss_kb(sb.channel.proc.pid) for sb in alive if sb.channel is not None)
        return {
            "max_concurrent": len(alive),
            "alive_ok": ok,
            "alive_rss_mb": round(rss / 1024, 1),
            "alive_rss_per_sandbox_mb": round(rss / 1024 / max(1, len(alive)), 2),
            "alive_setup_s": round(time.perf_counter() - t, 2),
        }
    finally:
        await asyncio.gather(*(sb.close() for sb in alive), return_exceptions=True)


async def _cycles(
    backend: LocalBackend, spec: SandboxSpec, n: int, concurrency: int, execs: int, changed: int
) -> tuple[dict[str, list[float]], int]:
    """``n`` lifecycles, ``concurrency`` at a time: samples per operation, and the most alive at once."""
    t: dict[str, list[float]] = {k: [] for k in OPS}
    sem = asyncio.Semaphore(concurrency)
    now_alive = 0
    max_alive = 0

    async def one(i: int) -> None:
        nonlocal now_alive, max_alive
        async with sem:
            t0 = time.perf_counter()
            sb = await _timed(t["create"], lambda: backend.create(spec))
            now_alive += 1
            max_alive = max(max_alive, now_alive)
            try:
                for k in range(execs):
                    r = await _timed(t["exec"], lambda: sb.exec(["true"]))
                    if k == 0:
                        t["cycle"].append(
                            (time.perf_counter() - t0) * 1000
                        )  # create + first exec, close added below
                    if r.exit_code != 0:
                        raise RuntimeError(f"bench exec failed: {r}")
                for j in range(changed):
                    await sb.write_file(f"pkg{j % 25}/m{j}.py", f"CHANGED = {i}\n".encode())
                sid = await _timed(t["snapshot"], sb.snapshot)
                await sb.write_file("pkg0/later.py", b"y = 2\n")
                await _timed(t["restore"], lambda: sb.restore(sid))
                await _timed(t["reset"], sb.reset)
            finally:
                await _timed(t["close"], sb.close)
                t["cycle"][-1] += t["close"][-1]
                now_alive -= 1

    await asyncio.gather(*(one(i) for i in range(n)))
    return t, max_alive


async def _alone(backend: LocalBackend, spec: SandboxSpec, n: int) -> dict[str, float]:
    """One sandbox with nothing else in flight (no other cycle, no pool refill on the loop): ``n``
    times a command that writes a file, then ``reset``. What one operation costs, against the cycles'
    figures, which include waiting for the others on two cores and one event loop."""
    t: dict[str, list[float]] = {"exec": [], "reset": []}
    sb = await backend.create(spec)
    try:
        for i in range(n):
            cmd = ["sh", "-c", f"echo {i} > /workspace/alone.txt"]
            await _timed(t["exec"], lambda: sb.exec(cmd))  # noqa: B023 (awaited at once)
            await _timed(t["reset"], sb.reset)
    finally:
        await sb.close()
    return _summary(t, "alone_")


async def _throughput(backend: LocalBackend, spec: SandboxSpec, n: int) -> dict[str, Any]:
    """Creates back to back, where a refill cannot keep up: ``burst`` makes ``n`` without closing any
    (a pre-fork pool serves its first few, the rest are cold); ``sustained`` creates, runs one
    command and closes, ``n`` times in a row (refills compete with it on the event loop)."""
    burst: list[float] = []
    held: list[LocalSandbox] = []
    pf = backend.prefork
    hits0 = pf.hits if pf is not None else 0
    try:
        for _ in range(n):
            held.append(await _timed(burst, lambda: backend.create(spec)))
    finally:
        await asyncio.gather(*(sb.close() for sb in held), return_exceptions=True)
    burst_hits = pf.hits - hits0 if pf is not None else 0
    t = time.perf_counter()
    for _ in range(n):
        sb = await backend.create(spec)
        try:
            await sb.exec(["true"])
        finally:
            await sb.close()
    wall = time.perf_counter() - t
    out: dict[str, Any] = {
        "burst_create_ms": round(statistics.median(burst), 3),
        "burst_create_p99_ms": round(_p(burst, 0.99), 3),
        "sustained_creates_per_s": round(n / wall, 1),
    }
    if pf is not None:  # creates served pre-started (the rest were cold: the refill did not keep up)
        out.update(burst_prefork_hits=burst_hits, sustained_prefork_hits=pf.hits - hits0 - burst_hits)
    return out


def _summary(t: dict[str, list[float]], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, xs in t.items():
        if not xs and prefix:
            continue
        out[f"{prefix}{k}_ms"] = round(statistics.median(xs), 3) if xs else 0.0
        out[f"{prefix}{k}_p99_ms"] = round(_p(xs, 0.99), 3)
    return out


async def _prefork_cost(backend: LocalBackend, spec: SandboxSpec) -> dict[str, Any]:
    """What the pool holds while it waits: its sandboxes and their memory (processes' RSS)."""
    assert backend.prefork is not None
    await backend.prefork.fill(spec)
    idle = backend.prefork.idle()
    rss = sum(_tree_rss_kb(sb.channel.proc.pid) for sb in idle if sb.channel is not None)
    return {
        "prefork_idle": len(idle),
        "prefork_idle_rss_mb": round(rss / 1024, 2),
        "prefork_idle_rss_per_sandbox_mb": round(rss / 1024 / max(1, len(idle)), 2),
    }


async def run_bench(
    n: int = 20,
    concurrency: int = 4,
    files: int = 1000,
    changed: int = 10,
    execs: int = 20,
    alive: int = 0,
    podman: bool = False,
    limits: bool = True,
    prefork: int = DEFAULT_BENCH_PREFORK,
    image: str | None = None,
) -> dict[str, Any]:
    """The lifecycle with a pre-fork pool of ``prefork`` per shape (the headline keys), and, in the same
    run, the cold path (``cold_*``: every create makes its sandbox from nothing); ``prefork=0``
    measures the cold path only, under the headline keys. ``image``: every sandbox runs on that image's
    root (from the image store), and ``--podman`` runs the same image."""
    cold = LocalBackend(prefork=0)
    ws = make_workspace(files)
    from sparring.sandbox.storage.layers import tree_digest

    # Pinned, as the pool pins every task: the workspace is verified and imported once, outside the timings.
    digest = tree_digest(ws)
    spec = SandboxSpec(
        workspace=ws, workspace_digest=digest, memory_mb=256 if limits else None, pids=256 if limits else None,
        image=image,
    )  # fmt: skip
    plain = SandboxSpec(workspace=ws, workspace_digest=digest, image=image)
    await (await cold.create(spec)).close()
    backend = LocalBackend(prefork=prefork) if prefork else cold
    out: dict[str, Any] = {}
    wall = time.perf_counter()
    try:
        if backend.prefork is not None:
            out.update(await _prefork_cost(backend, spec))
            t_cold, _ = await _cycles(cold, spec, n, concurrency, execs, changed)
            out.update(_summary(t_cold, "cold_"))
            await backend.prefork.fill(spec)
        t, max_alive = await _cycles(backend, spec, n, concurrency, execs, changed)
        if backend.prefork is not None:
            out.update(prefork_hits=backend.prefork.hits, prefork_misses=backend.prefork.misses)
            await backend.prefork.fill(spec)
            out.update({f"cold_{k}": v for k, v in (await _throughput(cold, spec, n)).items()})
        out.update(await _throughput(backend, spec, n))
        out.update(await _alone(cold, spec, 5 * n))
        pool = SandboxPool(cold, max_idle=concurrency)
        await pool.warm_spec(plain, concurrency)
        for _ in range(n):
            sb = await _timed(t["acquire"], lambda: pool.acquire_spec(plain))
            await pool.release(sb)
        await pool.close()
        out.update(_summary(t))
        out.update(
            max_concurrent=max(max_alive, concurrency),
            n=n,
            concurrency=concurrency,
            files=files,
            changed=changed,
            execs_per_sandbox=execs,
            limits=limits,
            mode=backend.mode,
            prefork=prefork if backend.prefork is not None else 0,
            cgroup_favordynmods=bool(tuning.state()["favordynmods"]),
            wall_s=round(time.perf_counter() - wall, 3),
        )
        if image is not None:
            rt = cold.image_for(spec)
            assert rt is not None
            out.update(image=image, image_digest=rt.digest)
        if alive:
            held = await _hold_alive(cold, plain, alive, concurrency)
            out.update(held)
            out["max_concurrent"] = max(out["max_concurrent"], held["max_concurrent"])
    finally:
        await backend.aclose()
    if podman:
        podman_image = None
        if image is not None:
            from sparring.images.podman import load_into_podman

            podman_image = await asyncio.to_thread(load_into_podman, image)
        out.update(await _podman_side_by_side(n, out["cycle_ms"], podman_image))
    shutil.rmtree(ws, ignore_errors=True)
    return out


async def _podman_side_by_side(n: int, local_cycle_ms: float, image: str | None = None) -> dict[str, Any]:
    """The same create + exec + close cycle through podman (runc), measured in this run.

    Two podman figures: ``podman run --rm IMAGE true`` (the cheapest podman
    lifecycle, so the ratio against it is conservative) and the OCI backend's
    own create + exec + close. Podman missing or broken is reported, not fatal.
    """
    from sparring.sandbox.oci.cycle import podman_cycle_ms

    n = max(1, min(n, 10))  # a podman cycle takes about a second here
    out: dict[str, Any] = {}
    for mode, key in (("run", "podman_cycle"), ("sandbox", "podman_sandbox_cycle")):
        try:
            res = await podman_cycle_ms(n, image=image, mode=mode)
        except Exception as e:
            out[f"{key}_error"] = f"{type(e).__name__}: {e}"
            continue
        out[f"{key}_ms"] = round(float(res["podman_cycle_ms"]), 3)  # type: ignore[arg-type]
        out[f"{key}_p99_ms"] = round(float(res["podman_cycle_p99_ms"]), 3)  # type: ignore[arg-type]
    if local_cycle_ms and "podman_cycle_ms" in out:
        out["podman_ratio"] = round(out["podman_cycle_ms"] / local_cycle_ms, 1)
    if local_cycle_ms and "podman_sandbox_cycle_ms" in out:
        out["podman_sandbox_ratio"] = round(out["podman_sandbox_cycle_ms"] / local_cycle_ms, 1)
    return out
