"""The Judge protocol, its result record and its typed failure.

A judge either returns a :class:`JudgeResult` with ``status="ok"`` (the score is
a fact about the workspace) or raises :class:`JudgeRunError` naming a
``reason`` (the judge could not score: unknown task, missing workspace, judge
timeout, a test runner that crashed before any candidate code ran...).
:func:`judge_error_result` turns that into a typed result, ``status=
"judge_error"``, never a silent zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from sparring.errors import JudgeError
from sparring.judge.records import TestCounts
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.loader import Task

JUDGE_ERROR_REASONS = (
    "task_unknown",
    "workspace_missing",
    "judge_timeout",
    "runner_crashed",
    "tests_crashed",
    "reference_failed",
    "sandbox_failed",
    "bad_task",
)


class JudgeRunError(JudgeError):
    """The judge could not score; ``reason`` is one of :data:`JUDGE_ERROR_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"judge_error ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


class JudgeResult(BaseModel):
    """A score and everything it was computed from."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "judge_error"] = "ok"
    reason: str | None = Field(None, description="Why the judge could not score (status judge_error).")
    reward: float
    components: dict[str, float]
    flags: list[str] = Field(default_factory=list)
    judge_version: str
    tests: TestCounts = Field(default_factory=TestCounts)
    per_test: dict[str, str] = Field(
        default_factory=dict, description="test id -> passed/failed/error/skipped/xfailed/xpassed/missing"
    )
    metrics: dict[str, float] = Field(default_factory=dict, description="Raw numbers behind the components.")
    dynamic_seed: int | None = Field(None, description="Seed of this evaluation's generated inputs.")
    duration_ms: float = 0.0
    log: str = Field("", description="Tail of the test runner's output, for debugging.")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def judge_error_result(err: JudgeRunError, version: str) -> JudgeResult:
    return JudgeResult(
        status="judge_error",
        reason=err.reason,
        reward=0.0,
        components={},
        judge_version=version,
        log=err.detail[-4000:],
    )


@dataclass(frozen=True)
class Usage:
    """What the agent spent on the rollout being scored: tool calls (steps) and generated tokens.

    ``max_steps`` defaults to the task's ``limits.max_steps``; ``max_tokens`` to the judge's token budget.
    """

    steps: int
    tokens: int = 0
    max_steps: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("steps", "tokens", "max_steps", "max_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"usage {name} must be a non-negative integer, got {v!r}")


class Judge(Protocol):
    """``score(task, diff)``; a judge that also takes ``usage=`` (a :class:`Usage`) says so with
    ``accepts_usage = True`` (see :func:`score_with_usage`), so older judges stay valid."""

    version: str

    async def score(self, task: Task, diff: WorkspaceDiff) -> JudgeResult: ...


def expect_judgements(judge: Judge, task: Task, n: int = 1) -> None:
    """Tell ``judge`` that ``n`` judgements of ``task`` are coming (a negative ``n``: that many announced
    will not), where it can use the notice (a warm pool starts launchers only for judgements it expects:
    :class:`sparring.judge.runner.sandbox.JudgePool`); a no-op for a judge without ``expect``."""
    expect = getattr(judge, "expect", None)
    if expect is not None:
        expect(task, n)


async def score_with_usage(judge: Judge, task: Task, diff: WorkspaceDiff, usage: Usage | None) -> JudgeResult:
    """``judge.score``, passing ``usage`` only to a judge that accepts it."""
    if usage is not None and getattr(judge, "accepts_usage", False):
        return await judge.score(task, diff, usage=usage)  # type: ignore[call-arg]
    return await judge.score(task, diff)
