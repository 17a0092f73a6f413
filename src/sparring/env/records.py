"""What the Environment hands back: an :class:`Observation` after reset, a :class:`StepResult`
after each step; and :class:`SampledTurn`, the raw-text form of an action.

Messages are OpenAI chat-completions dicts, tools OpenAI function schemas, so
any OpenAI-speaking loop can use them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparring.trajectory import TokenTrace


@dataclass(frozen=True)
class Observation:
    """The conversation so far (system + user prompt after reset) and the tools offered."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """What one step added to the conversation and where the episode stands.

    ``terminated``: the agent submitted (a final status: judged). ``truncated``: a
    budget ended it (steps: status ``truncated``; wall clock: ``timeout``), judged
    too. ``reward`` is None until judged (and stays None on a judge error).
    ``info`` holds ``status``, the full outputs of this step's tool calls
    (``tool_results``), and once judged the judge's ``components``, ``flags``,
    ``tests``, ``per_test`` and ``judge_version``.
    """

    messages: list[dict[str, Any]]
    terminated: bool
    truncated: bool
    reward: float | None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass(frozen=True)
class SampledTurn:
    """An action as a model sampled it: raw text, and the :class:`~sparring.trajectory.TokenTrace`
    it was decoded from when the ids are known (tool calls are parsed from ``text`` by
    :func:`sparring.chat_format.parse_tool_calls`; the trace is kept for training)."""

    text: str
    trace: TokenTrace | None = None
