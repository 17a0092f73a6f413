"""Write a whole import at once: every task built in a temp directory, then renamed into place.

An import either writes every task it was given or nothing: a failure part-way (a full disk, an
interrupt) leaves ``out`` as it was. Errors about the input are gathered per record first
(:class:`RecordErrors`), so one run names every bad record, not only the first.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparring import atomicfile
from sparring.errors import TaskError
from sparring.tasks.loader import Task, load_task, write_task
from sparring.tasks.spec import TaskSpec

Files = dict[str, str | bytes]


@dataclass
class Draft:
    """One task before it is written: its spec and the files of its three folders."""

    spec: TaskSpec
    workspace: Files
    hidden: Files
    solution: Files
    deleted: list[str] = field(default_factory=list)


class RecordErrors(TaskError):
    """Some records cannot become tasks; nothing was written. ``problems``: one line per bad record."""

    def __init__(self, problems: Sequence[str], total: int, noun: str = "records") -> None:
        self.problems = list(problems)
        super().__init__(
            f"{len(self.problems)} of {total} {noun} rejected, nothing written (first: {self.problems[0]})"
        )


def write_drafts(drafts: Sequence[Draft], out: Path) -> list[Task]:
    """Write every draft to out/<task id>/, all or nothing (built beside ``out``, then renamed in)."""
    out = Path(out)
    ids = [d.spec.id for d in drafts]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise TaskError(f"two records give the same task id {dup[0]}: rename one of them")
    out.parent.mkdir(parents=True, exist_ok=True)
    created_out = not out.exists()
    stage = atomicfile.temp_dir(out / ".import" if out.is_dir() else out)
    moved: list[Path] = []
    try:
        for d in drafts:
            write_task(stage / d.spec.id, d.spec, d.workspace, d.hidden, d.solution, d.deleted or None)
        if created_out:
            stage.rename(out)
        else:
            for d in drafts:
                dest = out / d.spec.id
                if dest.exists():
                    shutil.rmtree(dest)
                (stage / d.spec.id).rename(dest)
                moved.append(dest)
            stage.rmdir()
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for m in moved:
            shutil.rmtree(m, ignore_errors=True)
        raise
    return [load_task(out / i) for i in ids]
