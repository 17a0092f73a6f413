"""The trajectory record: everything that happened in one rollout, JSON-round-trippable.

It lives outside every room (like :mod:`sparring.errors`) because several rooms
hand it to each other: a policy produces a :class:`TokenTrace`, the Environment
places it in the conversation and produces :class:`ToolStep` and a
:data:`Status`, rollout assembles the :class:`Trajectory`, the store keeps it,
train and monitor read it. None of them has to import another to take it. The
judge's part (:class:`~sparring.judge.records.TestCounts`) is owned by the judge.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from sparring.judge.records import PROCESS_PREFIX, TestCounts

Status = Literal["ok", "truncated", "timeout", "policy_error", "infra_error", "judge_error"]
"""How an episode ended: the one list of statuses (docs/rollouts.md); every other spelling derives from it."""
STATUSES: tuple[str, ...] = get_args(Status)
# Statuses whose reward is a fact about the policy; the others must never enter a gradient.
TRAINABLE_STATUSES: frozenset[str] = frozenset({"ok", "truncated", "timeout"})
ERROR_STATUSES: frozenset[str] = frozenset(STATUSES) - TRAINABLE_STATUSES
"""Statuses where something failed (the policy, the infrastructure, the judge): the workspace is not the policy's work."""


def is_process_key(name: str) -> bool:
    """A component or flag of the process checks (how the agent worked), not of the outcome."""
    return name.startswith(PROCESS_PREFIX)


class ToolStep(BaseModel):
    """One tool call and its full result (the observation the model saw may be truncated)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    tool_call_id: str
    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str = ""
    output: str = Field("", description="Full output, never truncated.")
    observation_truncated: bool = False
    exit_code: int | None = None
    error: str | None = Field(None, description="Why the call failed (bad arguments, unknown tool...).")
    duration_ms: float = 0.0


class TokenTrace(BaseModel):
    """One assistant turn's tokens, the same record from the policy that sampled them to the
    training batch: the ids the policy saw (``prompt_ids``) and sampled (``completion_ids``, the
    loss goes on these only) with their logprobs, so training never re-tokenises.

    A policy makes it without a place (``turn`` and ``message_index`` None); the Environment
    places it in the conversation (:meth:`placed`) and keeps it in ``Environment.traces``, and
    the trajectory stores it as it is (``{"turn", "message_index", "prompt_ids",
    "completion_ids", "logprobs"}``: the shape stores have always held).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    turn: int | None = Field(None, description="Which assistant turn (0, 1, ...); None until placed.")
    message_index: int | None = Field(
        None, description="The assistant message's index in the conversation; None until placed."
    )
    prompt_ids: list[int] = Field(
        description="The ids the policy saw (may be empty: a server that sends none)."
    )
    completion_ids: list[int] = Field(description="The ids the policy sampled.")
    logprobs: list[float] | None = Field(None, description="One logprob per completion id, when known.")
    top_logprobs: list[list[tuple[int, float]]] | None = Field(
        None,
        exclude=True,
        description="Per completion id, the most likely (token id, logprob) pairs, when asked for (never stored).",
    )

    def placed(self, turn: int, message_index: int) -> TokenTrace:
        """This trace as the conversation's ``turn``-th assistant turn, its message at ``message_index``."""
        return self.model_copy(update={"turn": turn, "message_index": message_index})


class Trajectory(BaseModel):
    """One rollout of one task by one policy, judged."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    run_id: str = ""
    task_id: str
    task_version: int = 1
    task_digest: str
    family: str = ""
    difficulty: int = 0
    group_id: str = ""
    sample_index: int = 0
    policy: str
    policy_version: int = 0
    judge_version: str = ""
    status: Status
    reward: float | None = Field(
        None,
        description="The judge's reward; None when unjudged (infra/policy/judge error): never 0 by default.",
    )
    components: dict[str, float] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    tests: TestCounts = Field(default_factory=TestCounts)
    failing_tests: list[str] = Field(default_factory=list, description="Hidden test ids that did not pass.")
    attempts: int = 1
    infra_errors: list[str] = Field(
        default_factory=list,
        description="Infrastructure faults this sample survived (retries, resumes), in order.",
    )
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="Tool schemas the policy was offered."
    )
    messages: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[ToolStep] = Field(default_factory=list)
    traces: list[TokenTrace] = Field(
        default_factory=list, description="The tokens of each assistant turn that has them."
    )
    diff: dict[str, Any] = Field(
        default_factory=dict, description="WorkspaceDiff.to_json() of the final state."
    )
    timings: dict[str, float] = Field(default_factory=dict, description="Milliseconds per stage.")
    error: str | None = None
    submitted: bool = False
    created_at: float = Field(default_factory=time.time)
    parent_id: str | None = Field(
        None,
        description="The trajectory this one was forked from (None for a root): see `rollout --branch-at`.",
    )
    branch_turn: int | None = Field(
        None, description="Turns shared with the parent before the fork (None for a root)."
    )

    @property
    def trainable(self) -> bool:
        """A fact about the policy with a reward: may enter a gradient."""
        return self.status in TRAINABLE_STATUSES and self.reward is not None

    def lag(self, trainer_version: int) -> int:
        """How many policy versions (updates) the trainer is ahead of the policy that sampled this."""
        return trainer_version - self.policy_version

    def is_stale(self, trainer_version: int, max_staleness: int) -> bool:
        """The staleness bound k (0 = synchronous): more than k updates old. The experience queue
        and the GRPO trainer both drop by this one rule."""
        return self.lag(trainer_version) > max_staleness

    @property
    def outcome_flags(self) -> list[str]:
        """Flags about the final workspace (the judge's), without the process checks' flags."""
        return [f for f in self.flags if not is_process_key(f)]

    @property
    def process_flags(self) -> list[str]:
        """Flags of the process checks (``process/<check>``)."""
        return [f for f in self.flags if is_process_key(f)]

    @property
    def outcome_components(self) -> dict[str, float]:
        return {k: v for k, v in self.components.items() if not is_process_key(k)}

    @property
    def process_components(self) -> dict[str, float]:
        return {k: v for k, v in self.components.items() if is_process_key(k)}

    @property
    def retried(self) -> bool:
        return self.attempts > 1 or bool(self.infra_errors)

    @property
    def passed(self) -> bool:
        """The judged final workspace passes every hidden test (a rollout cut by its step or
        time budget is judged on what it left, like one that submitted)."""
        return self.trainable and self.components.get("all_pass", 0.0) >= 1.0
