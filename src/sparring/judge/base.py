"""The Judge protocol, its result record and its typed failure.

A judge either returns a :class:`JudgeResult` with ``status="ok"`` (the score is
a fact about the workspace) or raises :class:`JudgeRunError` naming a
``reason`` (the judge could not score: unknown task, missing workspace, judge
timeout, a test runner that crashed before any candidate code ran...).
:func:`judge_error_result` turns that into a typed result, ``status=
"judge_error"``, never a silent zero.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from sparring.errors import JudgeError
from sparring.rollout.trajectory import TestCounts
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


class Judge(Protocol):
    version: str

    async def score(self, task: Task, diff: WorkspaceDiff) -> JudgeResult: ...
