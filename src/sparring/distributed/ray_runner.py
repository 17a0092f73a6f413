"""The Ray side of a distributed rollout: node actors, and the driver's dispatch to them.

One long-lived :class:`~sparring.distributed.node.NodeWorker` actor per
machine that advertises the ``sparring_node`` custom resource (its value is
the node's sandbox capacity), pinned to that machine (hard node affinity).
The driver keeps the scheduler; :class:`RayRunner` is its
:class:`~sparring.rollout.runner.SampleRunner`: each episode goes to the
least-loaded node with a free slot, and only small things travel: the episode's
ids, the task's digest with an object-store reference (fetched by a node once),
the policy's spec. The judged trajectory comes back to the driver's one writer.

When a node actor dies (``RayActorError``/``ActorDiedError``, a lost node, an
episode past its time limit) the episode is sent again, to another node when
there is one, under the same trajectory id and with its attempt count and the
error in ``infra_errors``; the node is taken out of dispatch until it answers
again (Ray restarts the actor, whose backend reaps what the dead one left) or
is dropped when its machine left the cluster. A sample that no node could
finish is ``infra_error`` with reward None. A late answer of a node given up on
is never awaited, and the store is idempotent by id, so each sample is stored
exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.distributed.dispatch import Dispatcher, NodeLoad, NoNodeError
from sparring.distributed.node import EpisodeWire, NodeConfig, NodeWorker
from sparring.distributed.policy_ref import PolicyRef, policy_ref
from sparring.distributed.shipping import pack_task
from sparring.rollout.runner import SampleRequest, unplayed
from sparring.trajectory import Trajectory

log = logging.getLogger("sparring.distributed")

NODE_RESOURCE = "sparring_node"
"""The custom resource a sandbox node advertises; its amount is the node's sandbox capacity."""


@dataclass(frozen=True)
class RayRunnerOptions:
    max_node_failures: int = 2
    """Times one episode is sent again after the node running it died or overran."""
    episode_timeout_s: float | None = None
    """Beyond this an episode counts as lost with its node (default: from the stage limits)."""
    probe_timeout_s: float = 60.0
    """How long a failed node may take to answer again before it is dropped."""
    export_dir: Path | None = None
    """Where a driver-side transformers policy is saved per weights version (nodes read it)."""


def sandbox_nodes() -> dict[str, int]:
    """Alive Ray nodes advertising :data:`NODE_RESOURCE`, with their capacity."""
    import ray

    return {
        n["NodeID"]: int(n["Resources"][NODE_RESOURCE])
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get(NODE_RESOURCE, 0) >= 1
    }


def _alive(node_id: str) -> bool:
    import ray

    return any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())


class RayRunner:
    def __init__(self, node_cfg: NodeConfig, options: RayRunnerOptions | None = None) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.options = options or RayRunnerOptions()
        self.node_cfg = node_cfg
        nodes = sandbox_nodes()
        self.dispatch = Dispatcher(nodes)
        actor_cls = ray.remote(NodeWorker)
        self.actors: dict[str, Any] = {}
        for node_id, cap in nodes.items():
            self.actors[node_id] = actor_cls.options(  # type: ignore[attr-defined]
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                resources={NODE_RESOURCE: 0.001}, num_cpus=0, max_restarts=-1, max_task_retries=0,
                max_concurrency=4 * cap + 8,
            ).remote(node_id, NodeConfig(node_cfg.root, cap, node_cfg.scheduler, node_cfg.backend,
                                         node_cfg.sandbox_limits))  # fmt: skip
        ray.get([a.stats.remote() for a in self.actors.values()], timeout=300)  # every node is up
        self._task_refs: dict[str, Any] = {}
        self._policy_refs: dict[tuple[int, int], PolicyRef] = {}
        self._probing: set[str] = set()
        self._probes: set[asyncio.Task[None]] = set()

    @property
    def capacity(self) -> int:
        return self.dispatch.capacity

    def _task_ref(self, req: SampleRequest) -> Any:
        import ray

        ref = self._task_refs.get(req.task.digest)
        if ref is None:  # once per task: every node fetches these bytes at most once
            ref = self._task_refs[req.task.digest] = ray.put(pack_task(req.task))
        return ref

    async def _policy_ref(self, req: SampleRequest) -> PolicyRef:
        key = (id(req.policy), req.policy.version)
        ref = self._policy_refs.get(key)
        if ref is None:
            ref = await asyncio.to_thread(
                policy_ref, req.policy, self.options.export_dir or self.node_cfg.root / "weights"
            )
            self._policy_refs[key] = ref
        return ref

    def _timeout(self, req: SampleRequest) -> float:
        if self.options.episode_timeout_s is not None:
            return self.options.episode_timeout_s
        c, lim = self.node_cfg.scheduler, self.node_cfg.scheduler.limits
        wall = lim.rollout_s or req.task.spec.limits.wall_s
        return (wall + lim.sandbox_start_s) * (c.max_retries + 1) + lim.judge_s * (c.judge_retries + 1) + 60.0

    async def run(self, req: SampleRequest) -> Trajectory:
        import ray
        from ray.exceptions import RayError

        task_ref = self._task_ref(req)
        pref = await self._policy_ref(req)
        attempts, errors = req.attempts, list(req.infra_errors)
        exclude: str | None = None
        for _ in range(self.options.max_node_failures + 1):
            try:
                node = await self.dispatch.acquire(exclude)
            except NoNodeError as e:
                errors.append(f"attempt {attempts + 1}: {e}")
                attempts += 1
                break
            wire = EpisodeWire(req.task.digest, pref, req.index, req.traj_id, req.group_id, req.run_id, req.seed,
                               attempts, tuple(errors))  # fmt: skip
            ref = self.actors[node.node_id].run.remote(wire, [task_ref])
            try:
                out = await asyncio.wait_for(asyncio.wrap_future(ref.future()), self._timeout(req))
                traj = Trajectory.model_validate_json(out)
                node.completed += 1
                return traj
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
                raise
            except (RayError, TimeoutError) as e:
                attempts += 1
                what = str(e).strip().splitlines()[0] if str(e).strip() else "no answer in time"
                errors.append(
                    f"attempt {attempts}: node {node.node_id[:8]} lost the episode: {type(e).__name__}: {what[:200]}"
                )
                if isinstance(e, TimeoutError):
                    with contextlib.suppress(Exception):
                        ray.cancel(ref)  # its late answer is never awaited: the sample is stored once
                node.failures += 1
                exclude = node.node_id
                await self._suspect(node)
            finally:
                await self.dispatch.release(node)
        return unplayed(
            SampleRequest(req.task, req.policy, req.index, req.traj_id, req.group_id, req.run_id, req.seed,
                          attempts, errors),
            errors[-1].split(": ", 1)[-1] if errors else "no node could play the episode",
        )  # fmt: skip

    async def _suspect(self, node: NodeLoad) -> None:
        """Take ``node`` out of dispatch until its actor answers again (or drop it if its machine left)."""
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
                if not await asyncio.to_thread(_alive, node_id):
                    break
                try:
                    ref = self.actors[node_id].stats.remote()
                    await asyncio.wait_for(asyncio.wrap_future(ref.future()), 5.0)
                    state = "up"
                    break
                except Exception:
                    await asyncio.sleep(0.5)  # a restarting actor: ask again
        finally:
            self._probing.discard(node_id)
            log.warning("node %s is %s again", node_id[:8], state)
            await self.dispatch.set_state(node_id, state)

    def node_stats(self) -> dict[str, dict[str, Any]]:
        import ray

        out = {}
        for node_id, a in self.actors.items():
            if self.dispatch.nodes[node_id].state == "gone":
                continue
            with contextlib.suppress(Exception):
                out[node_id] = ray.get(a.stats.remote(), timeout=10)
        return out

    async def close(self) -> None:
        """Close every live node's pool, then end the actors."""
        import ray

        for t in list(self._probes):
            t.cancel()
        refs = [a.close.remote() for n, a in self.actors.items() if self.dispatch.nodes[n].state == "up"]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*(asyncio.wrap_future(r.future()) for r in refs)), 60)
        for a in self.actors.values():
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)
