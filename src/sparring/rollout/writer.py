"""Group commits for the store: finished samples written in batches, each writer awaiting its own.

Under high concurrency one transaction (and one thread hand-off) per sample
makes writers queue behind each other; here every sample that finishes while
a batch is being written joins the next batch, written with ``put_many`` in
one transaction. ``await writer.put(traj)`` returns only once ``traj`` is
committed (or raises the store's error), so "stored before reported" holds.
"""

from __future__ import annotations

import asyncio
import contextlib

from sparring.store.base import TrajectoryStore
from sparring.trajectory import Trajectory


class BatchWriter:
    def __init__(self, store: TrajectoryStore, max_batch: int = 16) -> None:
        self.store = store
        self.max_batch = max_batch
        self._pending: list[tuple[Trajectory, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0

    async def put(self, traj: Trajectory) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((traj, fut))
        self._wake.set()
        await fut

    def _write(self, trajs: list[Trajectory]) -> list[BaseException | None]:
        """One transaction for the batch; if it fails, each sample alone, so one bad record fails
        only its own writer. Returns each sample's error (None: committed)."""
        put_many = getattr(self.store, "put_many", None)
        if put_many is not None:
            try:
                put_many(trajs)
                return [None] * len(trajs)
            except Exception:
                if len(trajs) == 1:
                    raise
        errors: list[BaseException | None] = []
        for t in trajs:
            try:
                self.store.put(t)
                errors.append(None)
            except Exception as e:
                errors.append(e)
        return errors

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
                live = [(t, f) for t, f in batch if not f.cancelled()]
                try:
                    errors = await asyncio.to_thread(self._write, [t for t, _ in live])
                except Exception as e:
                    errors = [e] * len(live)
                self.batches += 1
                for (_, f), err in zip(live, errors, strict=True):
                    if f.done():
                        continue
                    if err is None:
                        f.set_result(None)
                    else:
                        f.set_exception(err)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
