"""The Policy protocol: given the conversation so far and the tools, produce one assistant turn.

Messages are OpenAI chat-completions dicts (``role``, ``content``, ``tool_calls``,
``tool_call_id``). A policy that generates tokens returns a :class:`TokenTrace`
so training never re-tokenises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from sparring.tasks.loader import Task

Message = dict[str, Any]
ToolSchema = dict[str, Any]


@dataclass(frozen=True)
class TokenTrace:
    """The tokens a policy saw and produced for one turn (loss goes on completion_ids only)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None
    """Per completion token, the most likely (token id, logprob) pairs, when asked for (not stored)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "logprobs": self.logprobs,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenTrace:
        return cls(list(d["prompt_ids"]), list(d["completion_ids"]), d.get("logprobs"))


@dataclass(frozen=True)
class ActRequest:
    """Everything a policy may look at for one turn.

    ``task`` is given to every policy; only scripted policies (oracle, hacker)
    read its privileged parts. Model policies see ``messages`` and ``tools``.
    """

    messages: list[Message]
    tools: list[ToolSchema]
    task: Task
    sample_index: int = 0
    seed: int = 0
    step: int = 0
    traces: list[dict[str, Any]] = field(default_factory=list)
    """The token traces of this conversation's earlier assistant turns (each with its
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
