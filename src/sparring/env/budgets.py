"""What one episode may spend: steps, wall clock, time per tool call, characters per observation.

The budgets belong to the Environment, not to the loop that drives it, so an
outside loop gets the same limits (and the same ``truncated`` / ``timeout``
outcomes) as Sparring's own rollouts. Defaults come from the task's
``[limits]``; anything given explicitly overrides them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sparring.env.tools import OBS_LIMIT
from sparring.tasks.loader import Task


@dataclass(frozen=True)
class Budgets:
    """Concrete limits of one episode (build with :meth:`for_task`)."""

    max_steps: int
    """Assistant turns; reaching it ends the episode as ``truncated`` (and it is judged)."""
    wall_s: float
    """Seconds the agent's commands may take in all (tool calls; not the policy's own thinking, which
    has its own per-turn budget, nor sandbox start or judging); then ``timeout``."""
    exec_timeout_s: float
    """One command inside the sandbox (``bash``, ``run_tests`` 2x): a timeout is an observation."""
    tool_call_s: float
    """One tool call end to end; beyond it the sandbox counts as hung (SandboxError: infrastructure)."""
    observation_chars: int = OBS_LIMIT
    """Characters of a tool output shown to the model; the rest is cut with an explicit marker."""
    sandbox_start_s: float = 120.0
    """Creating the sandbox, and taking its final diff."""
    judge_s: float = 600.0
    """Scoring the final workspace once."""
    judge_retries: int = 1
    """Further tries of a judge that failed or overran (then the status is ``judge_error``)."""

    @classmethod
    def for_task(cls, task: Task, **overrides: Any) -> Budgets:
        """The task's limits, with ``overrides`` (None values ignored) on top."""
        lim = task.spec.limits
        exec_s = float(overrides.get("exec_timeout_s") or lim.exec_timeout_s)
        base = cls(
            max_steps=lim.max_steps, wall_s=float(lim.wall_s), exec_timeout_s=exec_s,
            tool_call_s=exec_s * 4 + 10.0,
        )  # fmt: skip
        known = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(known) - set(cls.__dataclass_fields__)
        if unknown:
            from sparring.errors import ConfigError

            raise ConfigError(f"unknown budget(s): {', '.join(sorted(unknown))}; known: "
                              f"{', '.join(cls.__dataclass_fields__)}")  # fmt: skip
        return replace(base, **known)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}
