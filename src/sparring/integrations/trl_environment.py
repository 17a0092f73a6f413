"""TRL's ``environment_factory`` mode: a class whose public methods are exactly the tools the
Environment offers for the tasks (built-in and the tasks' own ``[[custom_tools]]``), one episode each.

TRL reads the tools off the class (``inspect.getmembers``, then ``get_json_schema`` of each method),
so the methods are generated from the Environment's own OpenAI schemas by
:func:`~sparring.integrations.tool_methods.tool_method`, checked to read back as declared. A call runs
the Environment's ``step`` with that one tool call and returns the observation text; a custom tool is
run by the task's tool server in the sandbox, as in every other mode.

Why one class per tool set, not a union: TRL renders one class's methods into every prompt of that
class. A union would show a task tools it does not have (a shell to a tool-use task whose point is that
the state changes only through its service), and two tasks may declare one name with different
parameters, which no single method can be. TRL 1.16 routes rows to environments itself
(``environment_factory={name: factory}`` and an ``environment`` column), so when the tasks declare
different tool sets :func:`environment_factory` returns that dict, one class per tool set, and
:func:`~sparring.integrations.trl.tasks_to_dataset` writes the matching ``environment`` column: the
same two lines of glue serve one tool set or several, and every prompt shows exactly its task's tools.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.env import Environment
from sparring.errors import TaskError
from sparring.integrations.tasks import TaskSet
from sparring.integrations.tool_methods import tool_method
from sparring.tasks.loader import Task
from sparring.trajectory import ToolStep


def offered_tools(task: Task) -> list[dict[str, Any]]:
    """The OpenAI schemas the Environment offers for ``task`` (its ``tools``), in order."""
    return Environment(task).tools


def tool_set_name(task: Task) -> str:
    """The name of ``task``'s tool set: a digest of the schemas offered, so equal tool sets share it
    whichever subset of tasks a dataset or a factory was built from (the ``environment`` column)."""
    canon = json.dumps(offered_tools(task), sort_keys=True, separators=(",", ":"))
    return "tools-" + hashlib.sha256(canon.encode()).hexdigest()[:10]


@dataclass
class _Loop:
    """An instance's event loop and current Environment: what its finalizer closes (not the instance)."""

    runner: asyncio.Runner
    env: Environment | None = None

    def close(self) -> None:
        try:
            if self.env is not None and self.env.sandbox is not None:
                self.runner.run(self.env.aclose())
        finally:
            self.runner.close()


class SparringToolEnv:
    """One episode for TRL's ``environment_factory``: its public methods are the task's tools.

    TRL builds instances (and reuses them), calls :meth:`reset` with the dataset row (``task_id``,
    ``seed``), lets the model call the tool methods, then asks :meth:`get_reward` for the judge's
    reward. :func:`environment_factory` subclasses it per tool set, binding the task set and adding
    one generated method per tool; this base has no tool methods of its own.
    """

    tasks: TaskSet
    tool_set: str = ""
    task_ids: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self._loop = _Loop(asyncio.Runner())
        # at garbage collection or, at the latest, at exit (atexit: threads may still start then, and
        # closing a runner starts one; in __del__ at interpreter shutdown that start hangs forever)
        weakref.finalize(self, self._loop.close)
        self._calls = 0
        self.tool_steps: list[ToolStep] = []
        """The Environment's record of every tool call this instance ran, over all its episodes (TRL reuses
        instances; the current episode's are also ``environment.steps``): what a trainer's calls reached."""

    def _run(self, coro: Any) -> Any:
        return self._loop.runner.run(coro)

    def reset(self, task_id: str | None = None, seed: int = 0, **row: Any) -> str | None:
        """Start the row's task in a fresh sandbox (the prompt already holds the task)."""
        task = self.tasks.task(task_id, int(seed or 0))
        if task.id not in self.task_ids:
            raise TaskError(f"task {task.id!r} offers other tools than this environment ({self.tool_set}): pass "
                            "environment_factory(tasks) itself (one class per tool set) with tasks_to_dataset(tasks), "
                            "whose environment column routes each row")  # fmt: skip
        if self._loop.env is not None:
            self._run(self._loop.env.aclose())
        self._loop.env = self.tasks.environment(task, int(seed or 0))
        self._run(self._loop.env.areset(int(seed or 0)))
        self._calls = 0
        return None

    def _tool(self, tool: str, args: dict[str, Any]) -> str:
        """Run one tool call through the Environment's step; the tool observations are the result."""
        env = self._loop.env
        if env is None:
            return "error: the environment was not reset"
        if env.done:
            return f"error: the episode is over (status {env.status}); nothing more runs"
        self._calls += 1
        n = len(env.steps)
        call = {"id": f"t{self._calls}", "type": "function",
                "function": {"name": tool, "arguments": json.dumps(args)}}  # fmt: skip
        res = self._run(env.astep({"role": "assistant", "content": "", "tool_calls": [call]}))
        self.tool_steps += env.steps[n:]
        tool_msgs = [m["content"] for m in res.messages if m.get("role") == "tool"]
        return "\n".join(tool_msgs) if tool_msgs else "\n".join(m["content"] for m in res.messages)

    @property
    def environment(self) -> Environment | None:
        """The current episode's Environment (its messages, steps and judgement stay readable after)."""
        return self._loop.env

    def get_reward(self) -> float:
        """The judge's reward for what the episode left in the workspace (judged now if not yet)."""
        env = self._loop.env
        if env is None:
            return 0.0
        if env.judgement is None:
            if not env.done:
                env.end("truncated")
            self._run(env.ajudge())
        self._run(env.aclose())
        return float(env.reward) if env.reward is not None else 0.0


RESERVED = frozenset(
    n
    for n in {*dir(SparringToolEnv), *SparringToolEnv.__annotations__, "tool_steps"}
    if not n.startswith("_")
)
"""SparringToolEnv's own public names: a tool may not take one of them."""


def _call(self: SparringToolEnv, tool: str, args: dict[str, Any]) -> str:
    return self._tool(tool, args)


def _env_class(ts: TaskSet, name: str, tasks: list[Task], class_name: str) -> type[SparringToolEnv]:
    methods: dict[str, Any] = {}
    for schema in offered_tools(tasks[0]):
        try:
            methods[schema["function"]["name"]] = tool_method(schema, _call, RESERVED)
        except TaskError as e:
            raise TaskError(f"task {tasks[0].id}: {e}") from None
    attrs = {"tasks": ts, "tool_set": name, "task_ids": frozenset(t.id for t in tasks),
             "__doc__": SparringToolEnv.__doc__, **methods}  # fmt: skip
    return type(class_name, (SparringToolEnv,), attrs)


def environment_factory(
    tasks: str | Path | TaskSet, **budget_overrides: Any
) -> type[SparringToolEnv] | dict[str, type[SparringToolEnv]]:
    """For ``GRPOTrainer(environment_factory=...)``: one Sparring episode per instance, exactly the
    tools the Environment offers as typed methods, the judge as ``get_reward`` (pair it with a dataset
    from :func:`~sparring.integrations.trl.tasks_to_dataset`). One class when the tasks share one tool
    set; when they declare different ones, a dict of classes by tool set (see the module docstring),
    which TRL routes by the dataset's ``environment`` column."""
    ts = tasks if isinstance(tasks, TaskSet) else TaskSet(tasks, **budget_overrides)
    groups: dict[str, list[Task]] = {}
    for t in ts.tasks:
        groups.setdefault(tool_set_name(t), []).append(t)
    if len(groups) == 1:
        ((name, members),) = groups.items()
        return _env_class(ts, name, members, "SparringEnv")
    return {name: _env_class(ts, name, members, f"SparringEnv_{name.removeprefix('tools-')}")
            for name, members in groups.items()}  # fmt: skip
