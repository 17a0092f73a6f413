"""Pre-started sandboxes per shape: a create becomes a pop and one overlay mount.

A cold create makes the sandbox's directory and tmpfs, binds the environment, mounts its rw tmpfs,
makes its cgroups, takes a network namespace, starts bubblewrap (namespaces, seccomp) and waits for
the exec server. None of that depends on the task's workspace, only on the sandbox's *shape*: its
spec without workspace, workspace digest, env and seed (env and seed apply per exec). A backend with
``prefork=N`` keeps up to N sandboxes of each shape it has been asked for started with all of that in
place and /workspace an empty directory; ``create`` takes one and mounts the workspace overlay (the
task's imported layer under the sandbox's still-empty rw/upper) under the running sandbox, exactly as
``reset`` remounts: the mount propagates into its /workspace.

* **Identical initial state**: a pre-started sandbox never ran anything but its exec server; its
  /tmp, $HOME, /dev/shm, upper layer and IPC namespace are as empty as a cold one's, and its mounts,
  environment, limits and namespaces the same (tests/sandbox/test_prefork.py compares them).
* **Never another shape's**: the pool key is the whole shape, so a sandbox made for one spec's
  limits, network, mounts or environment layer is never handed to a spec that differs in any.
* **Owned**: pre-started sandboxes are ordinary sandboxes of this process (their id names it), so
  its watchdog or the next backend reaps them with the rest when it dies; ``close`` ends them.
* **Honest cost**: refills run in the background, on the caller's event loop, one sandbox at a time
  per shape; while a shape's pool is empty a create takes the cold path (it never waits for a refill).

Not pooled: copy mode (the host cannot mount under a running sandbox) and ``network='allowlist'``
(its proxy is a server of one event loop); those are always made cold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec

if TYPE_CHECKING:
    from sparring.sandbox.local.backend import LocalBackend
    from sparring.sandbox.local.sandbox import LocalSandbox

log = logging.getLogger("sparring.sandbox")

ENV = "SPARRING_SANDBOX_PREFORK"
# A refill after a hand-out starts this much later: starting a sandbox is ~10 ms of work for the
# kernel and the CPUs, and begun at once it ran beside the first commands of the sandbox just handed
# out (a first `true` took 2.7 ms instead of 1.7 on 2 cores). A pool found empty refills at once.
HANDOFF_S = 0.005


def default_prefork() -> int:
    """The pool size of a backend not given one: ``$SPARRING_SANDBOX_PREFORK``, else 0 (off).

    Off by default: every pre-started sandbox holds an exec server, cgroups and a network namespace
    for as long as its backend lives, and every process with a backend (each Ray node, each test)
    would hold them; a trainer turns it on (``backend: {kind: local, prefork: 2}``)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or int(raw) > 64:
        raise SandboxError(f"${ENV}={raw!r} is not a pool size: give 0 (off) to 64 sandboxes per shape")
    return int(raw)


def shape_of(spec: SandboxSpec) -> SandboxSpec | None:
    """What a pre-started sandbox for ``spec`` is made from (everything but the workspace and the
    per-exec env and seed), or None for a spec that is never pre-started."""
    if spec.network == "allowlist":
        return None
    return spec.model_copy(update={"workspace": None, "workspace_digest": None, "env": {}, "seed": 0})


def _alive(sb: LocalSandbox) -> bool:
    """Healthy, and bubblewrap still running: a sandbox that waited while no event loop watched its
    channel (between two ``asyncio.run``) may have died unnoticed."""
    return sb.healthy and sb.channel is not None and sb.channel.proc.poll() is None


class PreforkPool:
    """Up to ``size`` started, never-used sandboxes per shape, refilled in the background."""

    def __init__(self, backend: LocalBackend, size: int) -> None:
        self.backend = backend
        self.size = size
        self._idle: dict[str, list[LocalSandbox]] = defaultdict(list)
        self._shapes: dict[str, SandboxSpec] = {}
        self._refills: dict[str, asyncio.Task[None]] = {}
        self._failed: set[str] = set()
        self._closed = False
        self.hits = 0  # creates served by a pre-started sandbox
        self.misses = 0  # creates of a pooled shape that found none ready (made cold)
        self.started = 0  # pre-started sandboxes made

    def idle(self) -> list[LocalSandbox]:
        """Every pre-started sandbox waiting now."""
        return [sb for v in self._idle.values() for sb in v]

    async def take(
        self, spec: SandboxSpec, lower: Path | None, layers: tuple[Path, ...]
    ) -> LocalSandbox | None:
        """A pre-started sandbox of ``spec``'s shape with its workspace mounted, or None (make it cold)."""
        shape = shape_of(spec)
        if shape is None or self._closed:
            return None
        key = shape.model_dump_json()
        self._shapes.setdefault(key, shape)
        idle, sb = self._idle[key], None
        while idle and sb is None:
            cand = idle.pop()
            if not _alive(cand):  # its server died while it waited (OOM, a kill from outside)
                await cand.close()
                continue
            try:
                cand._adopt(spec, lower, layers)
                sb = cand
            except BaseException:
                await cand.close()
                raise
        if sb is None:
            self.misses += 1
        else:
            self.hits += 1
        self._refill(key, after_s=HANDOFF_S if sb is not None else 0.0)
        return sb

    async def fill(self, spec: SandboxSpec) -> int:
        """Start sandboxes of ``spec``'s shape until ``size`` wait (a warm-up); returns how many wait."""
        shape = shape_of(spec)
        if shape is None or self._closed:
            return 0
        key = shape.model_dump_json()
        self._shapes.setdefault(key, shape)
        self._failed.discard(key)  # asked for explicitly: try again
        running = self._refill(key)
        if running is not None:
            await asyncio.shield(running)  # the one refill of this shape: never two, never past size
        return len(self._idle[key])

    def _refill(self, key: str, after_s: float = 0.0) -> asyncio.Task[None] | None:
        """Start the shape's refill unless one runs on this loop (or the shape failed); the one running.
        ``after_s``: it starts that much later (see :data:`HANDOFF_S`)."""
        loop = asyncio.get_running_loop()
        running = self._refills.get(key)
        if running is not None and not running.done() and running.get_loop() is loop:
            return running
        if key in self._failed:
            return None
        task = self._refills[key] = loop.create_task(self._fill(key, after_s))
        return task

    async def _fill(self, key: str, after_s: float = 0.0) -> None:
        if after_s > 0:
            await asyncio.sleep(after_s)
        shape, idle = self._shapes[key], self._idle[key]
        while len(idle) < self.size and not self._closed:
            try:
                sb = await self.backend._cold(shape, None, (), workspace=False)
            except Exception as e:  # a shape that cannot start: its creates go cold and say why there
                self._failed.add(key)
                log.warning(
                    "sandbox prefork: a sandbox could not be pre-started (%s); creates of its shape go cold",
                    e,
                )
                return
            self.started += 1
            if self._closed:
                await sb.close()
                return
            idle.append(sb)

    async def close(self) -> None:
        """Stop refilling and close every pre-started sandbox.

        A refill under way finishes its sandbox and closes it (``_closed``): cancelled mid-start, a
        sandbox's channel would be left with a failed future nobody reads."""
        self._closed = True
        loop = asyncio.get_running_loop()
        for t in self._refills.values():
            if t.done():
                continue
            if t.get_loop() is loop:
                with contextlib.suppress(Exception):
                    await t
            else:  # the loop that ran it is gone or elsewhere: only cancelling is left
                t.cancel()
        self._refills.clear()
        idle = self.idle()
        self._idle.clear()
        for sb in idle:
            with contextlib.suppress(Exception):
                await sb.close()
