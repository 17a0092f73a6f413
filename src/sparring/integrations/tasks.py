"""The task set every adapter serves: tasks by id, a deterministic pick by seed, one shared backend.

All adapters take a task directory (or a directory of task directories) and
let the caller name a task by id or leave it to the seed, so the same
``tasks/`` path means the same episodes in TRL, verifiers, OpenEnv and Gymnasium.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparring.env import Budgets, Environment
from sparring.errors import TaskError
from sparring.judge.base import Judge
from sparring.sandbox.base import SandboxBackend
from sparring.sandbox.config import make_backend
from sparring.tasks.loader import Task, find_tasks


class TaskSet:
    """The tasks under one path, by id; Environments made from it share one backend and one judge."""

    def __init__(
        self, path: str | Path, *, backend: SandboxBackend | None = None, judge: Judge | None = None,
        **budget_overrides: Any,
    ) -> None:  # fmt: skip
        """``budget_overrides`` (``max_steps=``, ``wall_s=``...) apply to every Environment made."""
        self.path = Path(path)
        self.tasks: list[Task] = find_tasks(self.path)
        self.by_id: dict[str, Task] = {t.id: t for t in self.tasks}
        self.budget_overrides = budget_overrides
        self._backend = backend
        self._judge = judge

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    @property
    def backend(self) -> SandboxBackend:
        if self._backend is None:
            self._backend = make_backend()
        return self._backend

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            from sparring.judge.pytest_judge import PytestJudge

            self._judge = PytestJudge(self.backend)
        return self._judge

    def task(self, task_id: str | None = None, seed: int = 0) -> Task:
        """The task ``task_id``, or without one the ``seed``-th task (modulo their number)."""
        if task_id is None:
            return self.tasks[seed % len(self.tasks)]
        try:
            return self.by_id[task_id]
        except KeyError:
            known = ", ".join(self.ids[:10]) + (" ..." if len(self.ids) > 10 else "")
            raise TaskError(f"unknown task_id {task_id!r} under {self.path}; known: {known}") from None

    def environment(
        self, task: Task | str | None = None, seed: int = 0, **budget_overrides: Any
    ) -> Environment:
        """A new Environment of ``task`` (a Task, an id, or None: picked by ``seed``)."""
        t = task if isinstance(task, Task) else self.task(task, seed)
        budgets = Budgets.for_task(t, **{**self.budget_overrides, **budget_overrides})
        return Environment(t, backend=self.backend, judge=self.judge, budgets=budgets)
