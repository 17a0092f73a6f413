"""A pool of warm sandboxes per environment: ``acquire`` hands out a ready one, ``release`` resets it.

* **Warm**: idle sandboxes are kept per spec (task workspace, limits, network),
  so an acquire from the pool costs a dict lookup; a cold acquire costs one
  ``create``. ``release`` resets the sandbox (every process killed, the
  copy-on-write layer, /tmp, $HOME, /dev/shm and IPC objects discarded) and
  keeps it warm; a sandbox whose reset cannot clear all of that (a local one
  in copy mode) or whose reset failed is closed instead.
* **Health**: a sandbox whose exec server died (killed, OOM) is noticed at
  once by its channel; it is closed, never handed out again, and replaced.
* **Maximum size and back-pressure**: at most ``max_size`` sandboxes exist
  (live + idle). An acquire beyond that first evicts an idle sandbox of
  another spec, otherwise waits until one is released.
* **Ready hook**: ``on_ready`` sees every sandbox the pool made or reset
  before anyone gets it, so a user can have it do work in advance (the judge
  prestarts its launcher there, importing pytest while no judgement waits).
* **Specs, not tasks**: the pool takes resolved specs; a task's spec (its
  workspace pinned by digest, limits, environment layer) is resolved above
  the sandbox room, by :class:`sparring.tasks.sandbox_spec.TaskSpecs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable

from sparring.sandbox.base import Sandbox, SandboxBackend, SandboxSpec

log = logging.getLogger(__name__)


def _healthy(sb: Sandbox) -> bool:
    return bool(getattr(sb, "healthy", True))


def resets_completely(sb: Sandbox) -> bool:
    """Whether ``reset`` clears everything the last user left (a local sandbox in copy mode does not)."""
    return bool(getattr(sb, "reusable", True))


class SandboxPool:
    """Warm sandboxes keyed by their spec; at most ``max_idle`` kept per key, ``max_size`` in all."""

    def __init__(
        self,
        backend: SandboxBackend,
        max_idle: int = 4,
        limits: bool = True,
        max_size: int | None = None,
        on_ready: Callable[[Sandbox], None] | None = None,
    ) -> None:
        """``on_ready(sb)`` runs on every sandbox made or reset by the pool, before anyone gets it (for
        instance to prestart a command the next user will want); what it raises is ignored."""
        if max_size is not None and max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.backend = backend
        self.max_idle = max_idle
        self.max_size = max_size
        self.limits = limits
        self.on_ready = on_ready
        self._idle: dict[str, list[Sandbox]] = defaultdict(list)  # keyed by the spec's JSON
        self._spec_of: dict[str, str] = {}
        self._resetting: dict[str, int] = defaultdict(int)  # per key: released, being reset, to be kept idle
        self._live: set[str] = set()
        self._creating = 0
        self.max_alive = 0
        self.replaced_unhealthy = 0
        self._cond = asyncio.Condition()

    @property
    def size(self) -> int:
        return len(self._live) + self._creating + sum(len(v) for v in self._idle.values())

    def shape(self, spec: SandboxSpec) -> SandboxSpec:
        """``spec`` as this pool creates it: without memory, pids and CPU limits when ``limits`` is off."""
        if self.limits:
            return spec
        return spec.model_copy(update={"memory_mb": None, "pids": None, "cpus": None})

    async def acquire_spec(self, spec: SandboxSpec) -> Sandbox:
        spec = self.shape(spec)
        key = spec.model_dump_json()
        stale: list[Sandbox] = []
        async with self._cond:
            while True:
                sb = self._pop_idle(key, stale)
                if sb is not None:
                    break
                if self.max_size is None or self.size < self.max_size:
                    self._creating += 1
                    break
                victim = next((v.pop() for k, v in self._idle.items() if v and k != key), None)
                if victim is not None:
                    stale.append(victim)
                    self._creating += 1
                    break
                await self._cond.wait()  # back-pressure: wait for a release
        for s in stale:
            with contextlib.suppress(Exception):
                await s.close()
        if sb is None:
            try:
                sb = await self.backend.create(spec)
            except BaseException:
                async with self._cond:
                    self._creating -= 1
                    self._cond.notify()
                raise
            self._creating -= 1
            self._ready(sb)
        self._spec_of[sb.id] = key
        self._live.add(sb.id)
        self.max_alive = max(self.max_alive, self.size)
        return sb

    def _pop_idle(self, key: str, stale: list[Sandbox]) -> Sandbox | None:
        """A healthy idle sandbox of ``key`` (under the lock); unhealthy ones met on the way go to ``stale``."""
        idle = self._idle.get(key)
        while idle:
            cand = idle.pop()
            if _healthy(cand):
                return cand
            stale.append(cand)
            self.replaced_unhealthy += 1
        return None

    async def acquire_idle(self, spec: SandboxSpec) -> Sandbox | None:
        """A warm sandbox for ``spec`` if one is idle now, else None: never creates, never waits."""
        spec = self.shape(spec)
        key = spec.model_dump_json()
        stale: list[Sandbox] = []
        async with self._cond:
            sb = self._pop_idle(key, stale)
            if sb is not None:
                self._spec_of[sb.id] = key
                self._live.add(sb.id)
        for s in stale:
            with contextlib.suppress(Exception):
                await s.close()
        return sb

    async def warm_spec(self, spec: SandboxSpec, n: int) -> None:
        spec = self.shape(spec)
        made = await asyncio.gather(*(self.backend.create(spec) for _ in range(n)))
        for sb in made:
            self._ready(sb)
        async with self._cond:
            self._idle[spec.model_dump_json()].extend(made)
            self.max_alive = max(self.max_alive, self.size)

    async def release(self, sb: Sandbox, broken: bool = False) -> None:
        """Reset ``sb`` and keep it idle when its spec has room for one more (``max_idle``), else close it:
        a sandbox that will be closed is neither reset nor readied (``on_ready``), so no work is spent on
        one nobody can get."""
        key = self._spec_of.pop(sb.id, None)
        kept = False
        if not broken and key is not None and _healthy(sb) and resets_completely(sb):
            async with self._cond:  # a place among the idle, held while the reset runs
                room = len(self._idle[key]) + self._resetting[key] < self.max_idle
                if room:
                    self._resetting[key] += 1
            if room:
                try:
                    await sb.reset()
                    kept = _healthy(sb)
                except Exception:
                    kept = False
                finally:
                    self._resetting[key] -= 1  # also when cancelled: the place is never lost
                if kept:  # no await from the count above to the append: nobody takes the place meanwhile
                    self._ready(sb)
                    self._live.discard(sb.id)
                    self._idle[key].append(sb)
                    async with self._cond:
                        self._cond.notify()
                    return
        with contextlib.suppress(Exception):
            await sb.close()
        async with self._cond:  # only now is there room: the closed one no longer counts
            self._live.discard(sb.id)
            self._cond.notify()

    def idle(self, spec: SandboxSpec) -> list[Sandbox]:
        """The sandboxes idle now for ``spec`` (a copy: the pool hands them out as before)."""
        return list(self._idle.get(self.shape(spec).model_dump_json(), ()))

    def holds(self, sandbox_id: str) -> bool:
        """Whether the sandbox ``sandbox_id`` is still the pool's (in use or idle), not closed."""
        return sandbox_id in self._live or any(sb.id == sandbox_id for v in self._idle.values() for sb in v)

    def _ready(self, sb: Sandbox) -> None:
        if self.on_ready is not None:
            try:
                self.on_ready(sb)
            except Exception:  # an optimisation only: the sandbox is as usable without it
                log.debug("on_ready failed for sandbox %s", sb.id, exc_info=True)

    async def close(self) -> None:
        async with self._cond:
            idle = [sb for v in self._idle.values() for sb in v]
            self._idle.clear()
        for sb in idle:
            with contextlib.suppress(Exception):
                await sb.close()
