"""The judge: scores a task's final workspace in a fresh sandbox, never trusting the agent's.

Public API: the :class:`Judge` protocol and its records (:class:`JudgeResult`,
:class:`TestCounts`, the per-test report, :class:`Usage`), the typed failure
(:class:`JudgeRunError`), and the pytest judge (:class:`PytestJudge`,
:class:`JudgeConfig`). Hack detection, the red-team catalogue, the golden set
and the review queue are in their own modules (``judge.hacks``,
``judge.redteam``, ``judge.golden``, ``judge.review``).
"""

from sparring.judge.base import (
    JUDGE_ERROR_REASONS,
    Judge,
    JudgeResult,
    JudgeRunError,
    Usage,
    judge_error_result,
    score_with_usage,
)
from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.judge.records import PerTestReport, TestCounts, TestOutcome

__all__ = [
    "JUDGE_ERROR_REASONS",
    "Judge",
    "JudgeConfig",
    "JudgeResult",
    "JudgeRunError",
    "PerTestReport",
    "PytestJudge",
    "TestCounts",
    "TestOutcome",
    "Usage",
    "judge_error_result",
    "score_with_usage",
]
