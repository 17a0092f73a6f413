"""The progress hook long library loops report to (SFT steps, RL iterations, rollouts, evaluations).

The library only counts; how progress is shown is the caller's business (the CLI draws rich
bars on a terminal and plain log lines otherwise). Keys name a bar; starting a key again
restarts that bar with a new total.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def start(self, key: str, total: int, label: str) -> None: ...

    def advance(self, key: str, n: int = 1) -> None: ...

    def finish(self, key: str, complete: bool = True) -> None:
        """End a bar; ``complete=False``: the work stopped early (an interrupt or an error), and the bar
        says how far it got instead of filling up."""
        ...


class NoProgress:
    """The default: nobody is watching."""

    def start(self, key: str, total: int, label: str) -> None:
        return None

    def advance(self, key: str, n: int = 1) -> None:
        return None

    def finish(self, key: str, complete: bool = True) -> None:
        return None
