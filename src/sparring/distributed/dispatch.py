"""The driver's choice of node for each episode: the least-loaded live node, within its capacity.

Every node has a capacity (sandboxes it may run at once, from its custom
resource). :meth:`Dispatcher.acquire` waits for a node with a free slot and
takes the one with the lowest load (in flight / capacity), so episodes spread
evenly and no node ever runs more than its capacity. A node that failed is
*down* (nothing is sent to it) until it answers again, and *gone* once its
machine left the cluster. The counters (``dispatched``, ``max_in_flight``)
are what the tests and the benchmarks read.

Pure asyncio, no Ray: the Ray runner and the simulation benchmark share it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sparring.errors import SandboxError

PROBE_TIMEOUT_S = 180.0
"""How long a down node may take to answer again before it is dropped for the rest of the run (a node
whose machine left the cluster is gone at once). A killed Ray actor's restart took over 30 s on a
loaded 2-core machine, so a short window loses a healthy node's capacity."""


@dataclass
class NodeLoad:
    node_id: str
    capacity: int
    in_flight: int = 0
    max_in_flight: int = 0
    dispatched: int = 0
    completed: int = 0
    failures: int = 0
    state: str = "up"  # up | down (restarting) | gone (left the cluster)

    @property
    def free(self) -> bool:
        return self.state == "up" and self.in_flight < self.capacity


class NoNodeError(SandboxError):
    """No node is left to run on (every one left the cluster): an infrastructure fault."""


class Dispatcher:
    def __init__(self, nodes: dict[str, int]) -> None:
        if not nodes:
            raise NoNodeError("no sandbox node in the cluster: start nodes with the sparring_node resource")
        self.nodes = {n: NodeLoad(n, c) for n, c in nodes.items()}
        self._cond = asyncio.Condition()

    @property
    def capacity(self) -> int:
        """Slots over every node that may still come back (up or down)."""
        return sum(n.capacity for n in self.nodes.values() if n.state != "gone")

    async def acquire(self, exclude: str | None = None) -> NodeLoad:
        """The least-loaded node with a free slot (waits for one); ``exclude`` is avoided while any
        other node may take the episode. Raises :class:`NoNodeError` when none is left."""
        async with self._cond:
            while True:
                live = [n for n in self.nodes.values() if n.state != "gone"]
                if not live:
                    raise NoNodeError("every sandbox node left the cluster")
                free = [n for n in live if n.free]
                others = [n for n in free if n.node_id != exclude]
                pick = others or ([] if any(n.node_id != exclude for n in live) else free)
                if pick:
                    node = min(pick, key=lambda n: (n.in_flight / n.capacity, n.dispatched))
                    node.in_flight += 1
                    node.dispatched += 1
                    node.max_in_flight = max(node.max_in_flight, node.in_flight)
                    return node
                await self._cond.wait()

    async def release(self, node: NodeLoad) -> None:
        async with self._cond:
            node.in_flight -= 1
            self._cond.notify_all()

    async def set_state(self, node_id: str, state: str) -> None:
        async with self._cond:
            node = self.nodes[node_id]
            if node.state != "gone":
                node.state = state
            self._cond.notify_all()

    def counts(self) -> dict[str, int]:
        """Episodes each node brought back (the ``nodes`` field of a rollout's JSON)."""
        return {n.node_id: n.completed for n in self.nodes.values()}
