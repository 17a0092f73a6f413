"""What generators that draw tasks one index at a time share: the drafted task, the count check, the
draw-until-n loop (a degenerate draw is skipped, so task ``i`` of a seed never depends on ``n``) and
writing the drafts out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparring.errors import ConfigError
from sparring.tasks.loader import Task, write_task
from sparring.tasks.spec import TaskSpec


@dataclass(frozen=True)
class Drafted:
    spec: TaskSpec
    workspace: dict[str, str | bytes]
    hidden: dict[str, str | bytes]
    solution: dict[str, str | bytes]


def check_count(n: object, max_n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= max_n:
        raise ConfigError(f"n must be an integer in [1, {max_n}], got {n!r}")
    return n


def draw_and_write(n: int, out: Path, draft: Callable[[int], Drafted | None]) -> list[Task]:
    """Draft indices 0, 1, ... until ``n`` drafts are kept; write each to ``out/<id>/``."""
    drafts: list[Drafted] = []
    index = 0
    while len(drafts) < n:
        d = draft(index)
        index += 1
        if d is not None:
            drafts.append(d)
    return [write_task(Path(out) / d.spec.id, d.spec, d.workspace, d.hidden, d.solution) for d in drafts]
