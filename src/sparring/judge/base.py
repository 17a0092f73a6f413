"""The Judge protocol and its result record."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from sparring.rollout.trajectory import TestCounts
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.loader import Task


class JudgeResult(BaseModel):
    """A score and everything it was computed from."""

    model_config = ConfigDict(extra="forbid")

    reward: float
    components: dict[str, float]
    flags: list[str] = Field(default_factory=list)
    judge_version: str
    tests: TestCounts = Field(default_factory=TestCounts)
    per_test: dict[str, str] = Field(default_factory=dict, description="test id -> passed/failed/error/skipped/missing")
    duration_ms: float = 0.0
    log: str = Field("", description="Tail of the test runner's output, for debugging.")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Judge(Protocol):
    version: str

    async def score(self, task: Task, diff: WorkspaceDiff) -> JudgeResult: ...
