"""A pool of warm sandboxes per task workspace: ``acquire`` hands out a ready one,
``release`` resets it (discarding the copy-on-write layer) and keeps it warm.

Acquire from a warm pool costs a dict lookup; a cold acquire costs one
``create``. A sandbox whose reset fails is closed, never handed out again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from pathlib import Path

from sparring.sandbox.base import Sandbox, SandboxBackend, SandboxSpec
from sparring.tasks.loader import Task


def spec_for_task(task: Task, seed: int = 0) -> SandboxSpec:
    lim = task.spec.limits
    return SandboxSpec(
        workspace=task.workspace,
        network=lim.network,
        memory_mb=lim.memory_mb,
        pids=lim.pids,
        disk_mb=lim.disk_mb,
        seed=seed,
    )


class SandboxPool:
    """Warm sandboxes keyed by their spec; at most ``max_idle`` kept per key."""

    def __init__(self, backend: SandboxBackend, max_idle: int = 4, limits: bool = True) -> None:
        self.backend = backend
        self.max_idle = max_idle
        self.limits = limits
        self._idle: dict[str, list[Sandbox]] = defaultdict(list)  # keyed by the spec's JSON
        self._spec_of: dict[str, str] = {}
        self._live: set[str] = set()
        self.max_alive = 0
        self._lock = asyncio.Lock()

    def _spec(self, task: Task) -> SandboxSpec:
        s = spec_for_task(task)
        if not self.limits:
            s = s.model_copy(update={"memory_mb": None, "pids": None})
        return s

    async def acquire_spec(self, spec: SandboxSpec) -> Sandbox:
        key = spec.model_dump_json()
        async with self._lock:
            idle = self._idle.get(key)
            sb = idle.pop() if idle else None
        if sb is None:
            sb = await self.backend.create(spec)
        self._spec_of[sb.id] = key
        self._live.add(sb.id)
        self.max_alive = max(self.max_alive, len(self._live) + sum(len(v) for v in self._idle.values()))
        return sb

    async def acquire(self, task: Task) -> Sandbox:
        return await self.acquire_spec(self._spec(task))

    async def warm(self, workspace: Path | Task, n: int) -> None:
        spec = self._spec(workspace) if isinstance(workspace, Task) else SandboxSpec(workspace=workspace)
        made = await asyncio.gather(*(self.backend.create(spec) for _ in range(n)))
        async with self._lock:
            self._idle[spec.model_dump_json()].extend(made)

    async def release(self, sb: Sandbox, broken: bool = False) -> None:
        spec = self._spec_of.pop(sb.id, None)
        self._live.discard(sb.id)
        if broken or spec is None:
            await sb.close()
            return
        try:
            await sb.reset()
        except Exception:
            await sb.close()
            return
        async with self._lock:
            if len(self._idle[spec]) < self.max_idle:
                self._idle[spec].append(sb)
                return
        await sb.close()

    async def close(self) -> None:
        async with self._lock:
            idle = [sb for v in self._idle.values() for sb in v]
            self._idle.clear()
        for sb in idle:
            with contextlib.suppress(Exception):
                await sb.close()
