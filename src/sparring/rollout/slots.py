"""Bounded resources with priority classes: a semaphore whose waiters are served by class, then FIFO.

``eval`` work goes before ``train`` work, which goes before ``replay`` of samples
that keep failing; within a class, first come first served, so the members of a
GRPO group (queued together) start together and finish together.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

PRIORITIES: dict[str, int] = {"eval": 0, "train": 1, "replay": 2}


def priority_rank(name: str) -> int:
    try:
        return PRIORITIES[name]
    except KeyError:
        from sparring.errors import ConfigError

        raise ConfigError(f"unknown priority class {name!r}: choose from {', '.join(PRIORITIES)}") from None


class PrioritySlots:
    """``n`` slots; :meth:`acquire` waits its turn by (rank, arrival). Cancel-safe."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("a resource needs at least one slot")
        self.size = n
        self._free = n
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @property
    def in_use(self) -> int:
        return self.size - self._free

    @property
    def waiting(self) -> int:
        return sum(1 for *_, f in self._waiters if not f.done())

    async def acquire(self, rank: int = 1) -> None:
        if self._free > 0 and not self.waiting:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (rank, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was handed over just as we were cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            *_, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1

    @asynccontextmanager
    async def slot(self, rank: int = 1) -> AsyncIterator[None]:
        await self.acquire(rank)
        try:
            yield
        finally:
            self.release()
