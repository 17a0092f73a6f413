"""Live progress of a rollout run on stderr: done of requested, in flight, failed, retried, throughput."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sparring.rollout.scheduler import SchedulerStats


def describe(s: SchedulerStats) -> str:
    parts = [f"in flight {s.in_flight}", f"judging {s.judging}", f"failed {s.failed}", f"retried {s.retried}"]
    parts += [f"{k} {v}" for k, v in (("replayed", s.replayed), ("resumed", s.resumed)) if v]
    return " · ".join(parts) + f" · {s.per_minute:.0f}/min"


class RolloutProgress:
    """``async with``-free: a context manager that redraws from ``stats()`` every ``period`` seconds."""

    def __init__(self, stats: Callable[[], SchedulerStats] | Any, console: Console, *, transient: bool = False,
                 period: float = 0.25) -> None:  # fmt: skip
        self._stats = stats if callable(stats) else (lambda: stats)
        self.period = period
        self.progress = Progress(
            TextColumn("rollouts"), BarColumn(bar_width=16), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"), console=console, transient=transient,
        )  # fmt: skip
        self._bar = self.progress.add_task("rollouts", total=None, info="")
        self._ticker: asyncio.Task[None] | None = None

    def refresh(self) -> None:
        s = self._stats()
        self.progress.update(self._bar, total=s.requested or None, completed=s.done, info=describe(s))

    async def _tick(self) -> None:
        while True:
            self.refresh()
            await asyncio.sleep(self.period)

    def __enter__(self) -> RolloutProgress:
        self.progress.__enter__()
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self.refresh()
        self.progress.__exit__(None, None, None)
