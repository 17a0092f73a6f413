"""The driver's half of a distributed rollout, whatever carries the episodes to the nodes.

:class:`NodeDriver` is the scheduler's :class:`~sparring.rollout.runner.SampleRunner`:
it sends each episode to the least-loaded node with a free slot (a
:class:`~sparring.distributed.dispatch.Dispatcher`), with small things only (ids,
the task's digest and a reference to its bytes, the policy's ref), and turns
the trajectory JSON a node sends back into the record the driver's one writer
stores. When the node running an episode is lost (its actor died, its machine
left, it overran the episode's time limit) the episode is sent again, to
another node when there is one, under the same trajectory id, with its attempt
count and the error in ``infra_errors``; the node is out of dispatch until it
answers again, or dropped once its machine is gone. An episode no node could
finish is ``infra_error`` with reward None. A node given up on is never
awaited again, so its late answer is never stored: each sample is stored once.

Subclasses say how a call reaches a node: :class:`~sparring.distributed.ray_runner.RayRunner`
(Ray actors) and the simulation benchmark's in-process nodes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparring.distributed.dispatch import PROBE_TIMEOUT_S, Dispatcher, NodeLoad, NoNodeError
from sparring.distributed.images import NEED_BLOBS, ImageWire, resolve_image
from sparring.distributed.node import EpisodeWire
from sparring.distributed.policy_ref import PolicyRef, policy_ref
from sparring.errors import ConfigError, ImageError
from sparring.images.store import ImageStore
from sparring.rollout.run_records import SchedulerConfig
from sparring.rollout.runner import SampleRequest, unplayed
from sparring.trajectory import Trajectory

log = logging.getLogger("sparring.distributed")


@dataclass(frozen=True)
class DriverOptions:
    max_node_failures: int = 2
    """Times one episode is sent again after the node running it died or overran."""
    episode_timeout_s: float | None = None
    """Beyond this an episode counts as lost with its node (default: from the stage limits)."""
    probe_timeout_s: float = PROBE_TIMEOUT_S
    """How long a failed node may take to answer again before it is dropped (see PROBE_TIMEOUT_S)."""
    export_dir: Path | None = None
    """Where a driver-side transformers policy is saved per weights version (nodes read it)."""
    image_root: Path | None = None
    """The driver's image store, where a task's image reference is resolved to the digest every node
    runs (None: ``$SPARRING_IMAGE_ROOT`` or ``~/.cache/sparring/images``)."""


class NodeDriver:
    lost: tuple[type[BaseException], ...] = (TimeoutError,)
    """The errors that mean "the node lost this episode" (a subclass adds its transport's)."""
    ship_images: bool = True
    """Whether nodes get a task's image from here by digest (False: their backend has its own, podman's)."""
    blob_chunk_bytes: int = 16 << 20
    """The size of the pieces an image blob is shipped in (the most of it the driver or a node holds)."""

    def __init__(self, nodes: dict[str, int], scheduler: SchedulerConfig, options: DriverOptions,
                 export_root: Path) -> None:  # fmt: skip
        self.options = options
        self.scheduler_config = scheduler
        self.dispatch = Dispatcher(nodes)
        self._task_refs: dict[str, Any] = {}
        self._image_wires: dict[str, ImageWire] = {}
        self._blob_refs: dict[str, dict[str, Any]] = {}
        self._image_lock = asyncio.Lock()
        self._policy_refs: dict[tuple[int, int], PolicyRef] = {}
        self._probing: set[str] = set()
        self._probes: set[asyncio.Task[None]] = set()
        # a driver-side transformers policy is exported here per weights version (nodes read it)
        self._export = options.export_dir or export_root / "weights" / uuid.uuid4().hex[:8]

    # -- the transport (subclasses) ---------------------------------------------------------------

    def _put_task(self, req: SampleRequest) -> Any:
        """A reference to the task's bytes that nodes fetch once (default: the task itself)."""
        return req.task

    def _put_blob(self, data: bytes) -> Any:
        """A reference to a piece of an image blob that nodes fetch only if they lack the blob (default:
        the bytes)."""
        return data

    def _submit(
        self, node_id: str, wire: EpisodeWire, task_ref: Any, blob_refs: dict[str, Any] | None = None
    ) -> tuple[asyncio.Future[str], Any]:
        """Start the episode on the node: (its future answer, a handle for :meth:`_cancel`).
        ``blob_refs``: the blobs of the task's image the driver ships, by digest, each as the references
        to its pieces in order (None: none)."""
        raise NotImplementedError

    def _cancel(self, handle: Any) -> None:
        """Stop an episode the driver no longer waits for (best effort)."""

    async def _alive(self, node_id: str) -> bool:
        """Whether the node's machine is still in the cluster."""
        return True

    async def _ping(self, node_id: str) -> None:
        """Return once the node answers (raises if it does not)."""

    # -- the runner ------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self.dispatch.capacity

    def _task_ref(self, req: SampleRequest) -> Any:
        ref = self._task_refs.get(req.task.digest)
        if ref is None:  # once per task: every node fetches these bytes at most once
            ref = self._task_refs[req.task.digest] = self._put_task(req)
        return ref

    async def _image(self, req: SampleRequest) -> tuple[ImageWire | None, dict[str, Any] | None]:
        """The task's image resolved to a digest here, once per reference per run (a tag is never
        resolved on a node), with its blobs put where nodes fetch them when no registry has it."""
        ref = req.task.spec.environment.image
        if ref is None or not self.ship_images:
            return None, None
        async with self._image_lock:
            wire = self._image_wires.get(ref)
            if wire is None:
                store = await asyncio.to_thread(ImageStore, self.options.image_root)
                wire = self._image_wires[ref] = await asyncio.to_thread(resolve_image, store, ref)
                if wire.pull is None:  # no registry to name: the driver ships it
                    await self._ship(wire, store)
        return wire, self._blob_refs.get(wire.digest)

    async def _ship(self, wire: ImageWire, store: ImageStore | None = None) -> dict[str, Any]:
        """The image's blobs where nodes fetch them: put once per image per run (every node fetches
        what it lacks, at most once)."""
        refs = self._blob_refs.get(wire.digest)
        if refs is None:
            held: ImageStore = store if store is not None else ImageStore(self.options.image_root)
            refs = {}
            for d in wire.blobs:
                refs[d] = await asyncio.to_thread(self._put_chunks, held, d)
            self._blob_refs[wire.digest] = refs
        return refs

    def _put_chunks(self, store: ImageStore, digest: str) -> tuple[Any, ...]:
        """Blob ``digest`` as references to its pieces, in order: read and put one piece at a time, so
        the driver never holds a whole layer (a node writes them in order to one file, then verifies)."""
        return tuple(self._put_blob(c) for c in store.read_blob_chunks(digest, self.blob_chunk_bytes))

    async def _policy_ref(self, req: SampleRequest) -> PolicyRef:
        key = (id(req.policy), req.policy.version)
        ref = self._policy_refs.get(key)
        if ref is None:
            ref = await asyncio.to_thread(policy_ref, req.policy, self._export)
            self._policy_refs[key] = ref
        return ref

    def _timeout(self, req: SampleRequest) -> float:
        if self.options.episode_timeout_s is not None:
            return self.options.episode_timeout_s
        c, lim = self.scheduler_config, self.scheduler_config.limits
        # the task's wall budget bounds the commands; each policy turn has its own budget on top
        wall = (lim.rollout_s or req.task.spec.limits.wall_s) + req.task.spec.limits.max_steps * lim.turn_s
        return (wall + lim.sandbox_start_s) * (c.max_retries + 1) + lim.judge_s * (c.judge_retries + 1) + 60.0

    async def run(self, req: SampleRequest) -> Trajectory:
        task_ref = self._task_ref(req)
        pref = await self._policy_ref(req)
        attempts, errors = req.attempts, list(req.infra_errors)
        try:
            image, blob_refs = await self._image(req)
        except (ImageError, ConfigError) as e:  # nothing to send: the episode ends here, no node could run it
            return self._unsent(req, e)
        exclude: str | None = None
        for _ in range(self.options.max_node_failures + 1):
            try:
                node = await self.dispatch.acquire(exclude)
            except NoNodeError as e:
                attempts += 1
                errors.append(f"attempt {attempts}: {e}")
                break
            wire = EpisodeWire(req.task.digest, pref, req.index, req.traj_id, req.group_id, req.run_id, req.seed,
                               attempts, tuple(errors), req.max_steps, image)  # fmt: skip
            fut, handle = self._submit(node.node_id, wire, task_ref, blob_refs)
            try:
                out = await asyncio.wait_for(fut, self._timeout(req))
                if out == NEED_BLOBS and image is not None:  # its pull failed there: the driver ships it
                    try:
                        async with self._image_lock:
                            blob_refs = await self._ship(image)
                    except ImageError as e:
                        return self._unsent(req, e)
                    fut, handle = self._submit(node.node_id, wire, task_ref, blob_refs)
                    out = await asyncio.wait_for(fut, self._timeout(req))
                traj = Trajectory.model_validate_json(out)
                node.completed += 1
                return traj
            except asyncio.CancelledError:
                self._cancel(handle)
                raise
            except self.lost as e:
                attempts += 1
                what = str(e).strip().splitlines()[0][:200] if str(e).strip() else "no answer in time"
                errors.append(
                    f"attempt {attempts}: node {node.node_id[:8]} lost the episode: {type(e).__name__}: {what}"
                )
                self._cancel(handle)  # a late answer is never awaited: the sample is stored once
                node.failures += 1
                exclude = node.node_id
                await self._suspect(node)
            finally:
                await self.dispatch.release(node)
        failed = replace(req, attempts=attempts, infra_errors=errors)
        return unplayed(failed, errors[-1].split(": ", 1)[-1] if errors else "no node could play the episode")

    def _unsent(self, req: SampleRequest, e: Exception) -> Trajectory:
        """The record of an episode whose image the driver could not send: ``infra_error``, one line."""
        n = req.attempts + 1
        return unplayed(
            replace(req, attempts=n, infra_errors=[*req.infra_errors, f"attempt {n}: {e}"]), str(e)
        )

    async def _suspect(self, node: NodeLoad) -> None:
        """Take ``node`` out of dispatch until it answers again (or drop it if its machine left)."""
        if node.node_id in self._probing:
            return
        await self.dispatch.set_state(node.node_id, "down")
        self._probing.add(node.node_id)
        t = asyncio.get_running_loop().create_task(self._probe(node.node_id))
        self._probes.add(t)
        t.add_done_callback(self._probes.discard)

    async def _probe(self, node_id: str) -> None:
        deadline = time.monotonic() + self.options.probe_timeout_s
        state = "gone"
        try:
            while time.monotonic() < deadline:
                if not await self._alive(node_id):
                    break
                try:
                    await asyncio.wait_for(self._ping(node_id), 5.0)
                    state = "up"
                    break
                except Exception:
                    await asyncio.sleep(0.5)  # a restarting node: ask again
        finally:
            self._probing.discard(node_id)
            log.warning("node %s is %s", node_id[:8], state)
            await self.dispatch.set_state(node_id, state)

    def stop_probes(self) -> None:
        for t in list(self._probes):
            t.cancel()
