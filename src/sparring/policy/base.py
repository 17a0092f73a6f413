"""The Policy protocol: given the conversation so far and the tools, produce one assistant turn.

Messages are OpenAI chat-completions dicts (``role``, ``content``, ``tool_calls``,
``tool_call_id``). A policy that generates tokens returns a
:class:`~sparring.trajectory.TokenTrace` (the one record of a turn's tokens, from
the policy to the training batch) so training never re-tokenises.

A request carries a :class:`PolicyTask`, what any agent may see of the task
(its id, family, instruction, tools and initial workspace files), never the
:class:`~sparring.tasks.loader.Task` with its reference solution and hidden
tests. A scripted policy that reads the reference (the oracle, the hacker, the
demonstrators) is a :class:`TaskBoundPolicy`: the rollout binds it to the task
(:func:`policy_for_task`) before its first turn, and it reads the task from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from sparring.tasks.loader import Task
from sparring.tasks.spec import CustomTool
from sparring.trajectory import TokenTrace

Message = dict[str, Any]
ToolSchema = dict[str, Any]


@dataclass(frozen=True)
class PolicyTask:
    """What a policy may see of a task: the public parts only.

    It holds no path into the task's directory (the workspace is a copy of its
    files), so nothing reachable from it leads to ``solution/`` or ``hidden/``.
    """

    id: str
    family: str
    instruction: str
    tools: tuple[str, ...]
    """Names of the tools the task offers."""
    custom_tools: tuple[CustomTool, ...] = ()
    """The tools the task declares (their schemas and tool-server commands, all in the workspace)."""
    files: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))
    """The initial workspace: relative path -> bytes (regular files only)."""

    @classmethod
    def of(cls, task: Task) -> PolicyTask:
        """The public view of ``task`` (reads its initial workspace once)."""
        from sparring.tasks import taskfs

        spec = task.spec
        return cls(
            id=task.id, family=spec.family, instruction=spec.instruction, tools=tuple(spec.tools),
            custom_tools=tuple(spec.custom_tools), files=MappingProxyType(taskfs.files(task.workspace)),
        )  # fmt: skip


@dataclass(frozen=True)
class ActRequest:
    """Everything a policy may look at for one turn: the conversation, the tools and the
    task's public view (:class:`PolicyTask`), never its reference."""

    messages: list[Message]
    tools: list[ToolSchema]
    task: PolicyTask
    sample_index: int = 0
    seed: int = 0
    step: int = 0
    traces: list[TokenTrace] = field(default_factory=list)
    """The token traces of this conversation's earlier assistant turns (placed: each with its
    ``message_index``): a token-level policy continues from their exact ids."""


@dataclass(frozen=True)
class Action:
    """One assistant turn: an OpenAI assistant message (maybe with tool_calls) and its tokens."""

    message: Message
    trace: TokenTrace | None = None
    usage: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class Policy(Protocol):
    """Anything that can play the agent. ``name`` is its spec (``oracle``, ``hf:PATH``...)."""

    name: str

    @property
    def version(self) -> int:
        """Weights version: bumped by every update, recorded in trajectories for staleness."""
        ...

    async def act(self, request: ActRequest) -> Action: ...

    async def close(self) -> None: ...


@runtime_checkable
class TaskBoundPolicy(Protocol):
    """A scripted policy that reads the task's privileged parts (reference solution, tags): it acts
    only once bound to the task, which the rollout does (:func:`policy_for_task`) for each episode."""

    def for_task(self, task: Task) -> Policy:
        """This policy bound to ``task`` (a copy: the unbound one stays shareable across tasks)."""
        ...


def policy_for_task(policy: Policy, task: Task) -> Policy:
    """``policy`` ready to play ``task``: bound to it when it is a :class:`TaskBoundPolicy`, else as is."""
    return policy.for_task(task) if isinstance(policy, TaskBoundPolicy) else policy
