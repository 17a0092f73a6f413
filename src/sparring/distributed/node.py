"""The node actor's body: one per machine, owning that machine's sandbox pool, judge and layers.

A :class:`NodeWorker` plays episodes the driver sends it with a local
:class:`~sparring.rollout.scheduler.RolloutScheduler` (no store: the driver
keeps the one writer), so a sample on a node gets exactly the retries, stage
limits and typed statuses it gets locally. Its sandboxes live under a root of
its own: when the actor dies and Ray restarts it, the new backend reaps what
the dead one left (processes, mounts, cgroups, directories), and the dead
process's watchdog does the same if nothing restarts.

Plain Python: :mod:`sparring.distributed.ray_runner` wraps it as a Ray actor.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparring.distributed.images import NEED_BLOBS, BlobsWanted, ImageUnavailable, ImageWire, NodeImages
from sparring.distributed.policy_ref import PolicyRef
from sparring.distributed.shipping import TaskCache
from sparring.images.store import ImageStore
from sparring.policy.base import Policy
from sparring.rollout.run_records import SchedulerConfig
from sparring.rollout.runner import SampleRequest, unplayed
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.config import LocalBackendConfig, OCIBackendConfig, make_backend
from sparring.sandbox.pool import SandboxPool
from sparring.tasks.loader import Task


@dataclass(frozen=True)
class NodeConfig:
    root: Path
    """Where this node's sandboxes and task cache live (one subdirectory per node)."""
    capacity: int
    scheduler: SchedulerConfig
    backend: LocalBackendConfig | OCIBackendConfig
    sandbox_limits: bool = True
    judge: Any = None
    """The judge's JudgeConfig (None: the training judge's defaults; eval runs pass split=eval)."""
    image_root: Path | None = None
    """This node's image store (a local path on every node; None: ``$SPARRING_IMAGE_ROOT`` or
    ``~/.cache/sparring/images`` there). Images of tasks reach it by digest on first use."""


@dataclass(frozen=True)
class EpisodeWire:
    """What the driver sends per episode: ids, the task's digest, the policy's ref. Small."""

    digest: str
    policy: PolicyRef
    index: int
    traj_id: str
    group_id: str
    run_id: str
    seed: int
    attempts: int
    infra_errors: tuple[str, ...]
    max_steps: int | None = None
    image: ImageWire | None = None
    """The task's image, resolved to a digest by the driver (None: the task runs on the host's system)."""


class NodeWorker:
    def __init__(self, node_id: str, cfg: NodeConfig) -> None:
        from sparring.judge.pytest_judge import PytestJudge
        from sparring.judge.runner.sandbox import judge_pool_for

        self.node_id = node_id
        self.root = cfg.root / f"node-{node_id[:16]}"
        self.root.mkdir(parents=True, exist_ok=True)
        backend_cfg = cfg.backend.model_copy(update={"root": self.root / "sandboxes"})
        self.backend = make_backend(backend_cfg)  # reaps what a dead predecessor on this root left
        self.images: NodeImages | None = None  # made on the first image task (image_root is then created)
        self._image_root = cfg.image_root
        self.pool = SandboxPool(self.backend, max_idle=cfg.capacity, limits=cfg.sandbox_limits)
        self.judge_pool = judge_pool_for(self.backend, cfg.capacity)  # this node's warm judge
        self.judge = PytestJudge(
            self.backend, limits=cfg.sandbox_limits, config=cfg.judge, pool=self.judge_pool
        )
        self.sched = RolloutScheduler(
            self.pool, self.judge, None, config=replace(cfg.scheduler, concurrency=cfg.capacity)
        )
        self.tasks = TaskCache(self.root / "tasks")
        self._policies: dict[str, Policy] = {}
        self._fetching: dict[str, asyncio.Lock] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.played = 0
        self.pid = os.getpid()
        self.started = time.time()

    def _policy(self, ref: PolicyRef) -> Policy:
        key = ref.key()
        p = self._policies.get(key)
        if p is None:
            if len(self._policies) >= 2:  # an older weights version: no episode will ask for it again
                self._policies.pop(next(iter(self._policies)))
            p = self._policies[key] = ref.build()
        return p

    async def _task(self, digest: str, task_ref: list[Any]) -> Task:
        """The task ``digest``: from the cache, or fetched and unpacked once (concurrent episodes of a
        new task wait for the one fetch)."""
        task = self.tasks.get(digest)
        if task is not None:
            return task
        lock = self._fetching.setdefault(digest, asyncio.Lock())
        async with lock:
            task = self.tasks.get(digest)
            if task is None:
                data = await task_ref[0]
                task = await asyncio.to_thread(self.tasks.put, digest, data)
        return task

    async def _image(self, wire: ImageWire, blob_refs: dict[str, Any] | None) -> None:
        """The task's image in this node's store, by the driver's digest (fetched once, on first use),
        and its reference pinned to that digest for this node's sandboxes and judge."""
        pins = getattr(self.backend, "image_pins", None)
        if not isinstance(pins, dict):  # the OCI backend: podman's own images, as before
            return
        if self.images is None:  # the local backend runs images from this node's own store
            store = ImageStore(self._image_root)
            setattr(self.backend, "image_store", store)  # noqa: B010 (not on the SandboxBackend protocol)
            self.images = NodeImages(store)
        rec = await self.images.ensure(wire, blob_refs)
        pins[wire.ref] = rec.digest

    async def run(self, wire: EpisodeWire, task_ref: list[Any]) -> str:
        """Play and judge one episode; the trajectory as JSON. ``task_ref`` holds the object-store
        reference of the packed task, fetched only if this node does not hold the digest yet, and for
        an image the driver ships, its blobs' references (fetched only if this node lacks them)."""
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            task = await self._task(wire.digest, task_ref)
            req = SampleRequest(task, self._policy(wire.policy), wire.index, wire.traj_id, wire.group_id,
                                wire.run_id, wire.seed, wire.attempts, list(wire.infra_errors), wire.max_steps)  # fmt: skip
            if wire.image is not None:
                try:
                    await self._image(wire.image, task_ref[1] if len(task_ref) > 1 else None)
                except BlobsWanted:  # its registry failed here: the driver, which holds it, ships it
                    return NEED_BLOBS
                except ImageUnavailable as e:  # the episode fails, not the node: no other node does better
                    req.attempts += 1
                    req.infra_errors.append(f"attempt {req.attempts}: node {self.node_id[:8]}: {e}")
                    return unplayed(req, str(e)).model_dump_json()
            traj = await self.sched.play_sample(req)
            traj.timings["node_pid"] = float(self.pid)
            self.played += 1
            return traj.model_dump_json()
        finally:
            self.in_flight -= 1

    def stats(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id, "pid": self.pid, "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight, "played": self.played, "tasks_unpacked": self.tasks.unpacked,
            "started": self.started,
            "images_pulled": self.images.pulled if self.images else 0,
            "images_received": self.images.received if self.images else 0,
            "image_pieces_received": self.images.received_pieces if self.images else 0,
            "image_root": str(self.images.store.root) if self.images else None,
        }  # fmt: skip

    def live_sandboxes(self) -> list[tuple[str, list[str]]]:
        """This node's sandbox directories with their cgroups (what a test checks is reaped)."""
        home = getattr(self.backend, "home", None)
        out = []
        for d in sorted(Path(home).glob("sb-*")) if home is not None else []:
            try:
                cgs = (d / "cgroups").read_text().split()
            except OSError:
                cgs = []
            out.append((str(d), cgs))
        return out

    async def close(self) -> None:
        await self.pool.close()
        await self.judge_pool.close()
        await self.backend.aclose()  # pre-forked sandboxes (SPARRING_SANDBOX_PREFORK) end with the node
        for p in self._policies.values():
            close = getattr(p, "close", None)
            if close is not None:
                await close()
