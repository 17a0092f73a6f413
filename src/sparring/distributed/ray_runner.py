"""Node actors on Ray, and the driver's transport to them.

One long-lived :class:`~sparring.distributed.node.NodeWorker` actor per
machine that advertises the ``sparring_node`` custom resource (its value is
the node's sandbox capacity), pinned to that machine (hard node affinity),
restarted by Ray when it dies (its backend then reaps what the dead one left).
:class:`RayRunner` is the :class:`~sparring.distributed.driver.NodeDriver`
that reaches them: a task's bytes go into the object store once (nodes fetch
them by digest), each episode is one actor call, and a ``RayActorError`` /
``ActorDiedError`` / lost object means the node lost the episode.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any

from sparring.distributed.driver import DriverOptions, NodeDriver
from sparring.distributed.node import EpisodeWire, NodeConfig, NodeWorker
from sparring.distributed.shipping import pack_task
from sparring.rollout.runner import SampleRequest
from sparring.sandbox.config import LocalBackendConfig

NODE_RESOURCE = "sparring_node"
"""The custom resource a sandbox node advertises; its amount is the node's sandbox capacity."""

RayRunnerOptions = DriverOptions


def sandbox_nodes() -> dict[str, int]:
    """Alive Ray nodes advertising :data:`NODE_RESOURCE`, with their capacity."""
    import ray

    return {
        n["NodeID"]: int(n["Resources"][NODE_RESOURCE])
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get(NODE_RESOURCE, 0) >= 1
    }


class RayRunner(NodeDriver):
    def __init__(self, node_cfg: NodeConfig, options: DriverOptions | None = None) -> None:
        import ray
        from ray.exceptions import RayError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sandbox_nodes()
        super().__init__(nodes, node_cfg.scheduler, options or DriverOptions(), node_cfg.root)
        self.lost = (RayError, TimeoutError)
        self.node_cfg = node_cfg
        self.ship_images = isinstance(node_cfg.backend, LocalBackendConfig)  # podman (OCI) has its own images
        actor_cls = ray.remote(NodeWorker)
        self.actors: dict[str, Any] = {}
        for node_id, cap in nodes.items():
            self.actors[node_id] = actor_cls.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                resources={NODE_RESOURCE: 0.001},
                num_cpus=0,
                max_restarts=-1,
                max_task_retries=0,
                max_concurrency=4 * cap + 8,
            ).remote(node_id, replace(node_cfg, capacity=cap))
        ray.get([a.stats.remote() for a in self.actors.values()], timeout=300)  # every node is up

    def _put_task(self, req: SampleRequest) -> Any:
        import ray

        return ray.put(pack_task(req.task))

    def _put_blob(self, data: bytes) -> Any:
        import ray

        return ray.put(data)

    def _submit(
        self, node_id: str, wire: EpisodeWire, task_ref: Any, blob_refs: dict[str, Any] | None = None
    ) -> tuple[asyncio.Future[str], Any]:
        refs = [task_ref] if blob_refs is None else [task_ref, blob_refs]  # in a list: fetched only if needed
        ref = self.actors[node_id].run.remote(wire, refs)
        return asyncio.wrap_future(ref.future()), ref

    def _cancel(self, handle: Any) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.cancel(handle)

    async def _alive(self, node_id: str) -> bool:
        import ray

        nodes = await asyncio.to_thread(ray.nodes)
        return any(n["NodeID"] == node_id and n.get("Alive") for n in nodes)

    async def _ping(self, node_id: str) -> None:
        await asyncio.wrap_future(self.actors[node_id].stats.remote().future())

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

        self.stop_probes()
        refs = [a.close.remote() for n, a in self.actors.items() if self.dispatch.nodes[n].state == "up"]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*(asyncio.wrap_future(r.future()) for r in refs)), 60)
        for a in self.actors.values():
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)
