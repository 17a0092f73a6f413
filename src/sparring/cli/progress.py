"""Progress on stderr: rich bars (count, elapsed, ETA) on a terminal, plain log lines otherwise.

When stderr is not a terminal (CI logs, `2> file`, a pipe) bars would print as escape-code
noise, so each bar becomes a few whole lines instead: one when it starts, one per tenth of
its total, one when it ends, never wrapped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from sparring.cli.common import err_console


@dataclass
class _Plain:
    label: str
    total: int
    done: int = 0
    t0: float = 0.0
    tenth: int = 0


class Bars:
    """A :class:`sparring.monitor.progress.Progress` drawn on stderr; use as a context manager."""

    def __init__(self) -> None:
        self.live = err_console.is_terminal
        self._lock = threading.Lock()
        self._plain: dict[str, _Plain] = {}
        self._ids: dict[str, Any] = {}
        self._p = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=err_console, transient=False,
        ) if self.live else None  # fmt: skip

    def __enter__(self) -> Bars:
        if self._p is not None:
            self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()

    def log(self, line: str) -> None:
        """A whole log line (above the bars on a terminal)."""
        err_console.print(line, highlight=False, soft_wrap=True, markup=False)

    def start(self, key: str, total: int, label: str) -> None:
        with self._lock:
            if self._p is not None:
                if key in self._ids:
                    self._p.remove_task(self._ids.pop(key))
                self._ids[key] = self._p.add_task(label, total=max(total, 0))
                return
            self._plain[key] = _Plain(label, max(total, 0), t0=time.perf_counter())
        self.log(f"{label}: 0/{total}")

    def advance(self, key: str, n: int = 1) -> None:
        line = None
        with self._lock:
            if self._p is not None:
                if key in self._ids:
                    self._p.advance(self._ids[key], n)
                return
            b = self._plain.get(key)
            if b is None:
                return
            b.done += n
            tenth = (10 * b.done // b.total) if b.total else 0
            if tenth > b.tenth and b.done < b.total:
                b.tenth = tenth
                line = self._line(b)
        if line:
            self.log(line)

    def finish(self, key: str, complete: bool = True) -> None:
        """End a bar: filled when the work completed; ``complete=False`` (interrupted, failed) leaves
        it where the work stopped and says so."""
        line = None
        with self._lock:
            if self._p is not None:
                if key in self._ids:
                    t = self._ids[key]
                    task = self._p.tasks[[x.id for x in self._p.tasks].index(t)]
                    if complete:
                        self._p.update(t, completed=task.total)
                    else:
                        self._p.update(t, description=f"{task.description} (stopped)")
                return
            b = self._plain.pop(key, None)
            if b is not None:
                if complete:
                    b.done = max(b.done, b.total)
                line = self._line(b, final=True, complete=complete)
        if line:
            self.log(line)

    @staticmethod
    def _line(b: _Plain, final: bool = False, complete: bool = True) -> str:
        el = time.perf_counter() - b.t0
        if final:
            return f"{b.label}: {b.done}/{b.total} {'done' if complete else 'stopped'} in {el:.1f}s"
        eta = el / b.done * (b.total - b.done) if b.done else 0.0
        return f"{b.label}: {b.done}/{b.total} ({100 * b.done // max(b.total, 1)}%) {el:.1f}s elapsed, eta {eta:.0f}s"


@contextmanager
def bar_while(label: str, total: int, count: Callable[[], int], every_s: float = 0.5) -> Iterator[Bars]:
    """A bar that follows ``count()`` (polled) while the body runs: for work that cannot call back
    (e.g. a generator writing task directories one by one)."""
    stop = threading.Event()
    with Bars() as bars:
        bars.start("work", total, label)
        seen = [0]

        def poll() -> None:
            while not stop.wait(every_s):
                n = min(count(), total)
                if n > seen[0]:
                    bars.advance("work", n - seen[0])
                    seen[0] = n

        t = threading.Thread(target=poll, daemon=True)
        t.start()
        try:
            yield bars
        finally:
            stop.set()
            t.join()
        bars.finish("work")
