"""The judge: scores a task's final workspace in a fresh sandbox, never trusting the agent's.

Public API: the :class:`Judge` protocol and its records (:class:`JudgeResult`,
:class:`TestCounts`, the per-test report, :class:`Usage`), the typed failure
(:class:`JudgeRunError`), and the pytest judge (:class:`PytestJudge`,
:class:`JudgeConfig`).

Layout, along the trust boundary:

- ``judge/`` itself (HOST): the verdict: the protocol and records (``base``, ``records``), the pytest
  judge (``pytest_judge``), reading the launcher's report (``report``) and judging its observations
  against the withheld expectations (``withheld``), reward composition (``reward``), the process
  checks on the trajectory (``process``), judging a directory (``directory``) and the judge version
  (``version``);
- ``judge/inside/`` (INSIDE the candidate's sandbox): the launcher, the dynamic-test driver, the
  probes' observer and wire format, the import gate; standard library and pytest only;
- ``judge/static/`` (HOST): static checks on the diff, the hack detectors;
- ``judge/dynamic/`` (HOST): probes, expression skeletons, generated inputs and their mutation;
- ``judge/runner/`` (HOST): the sandbox runs, the warm judge pool, batches;
- ``judge/quality/`` (HOST): golden set, regress, red team, canaries, review queue, benchmark.

The hack catalogue the detectors and the red team use is :mod:`sparring.tasks.hacks`, below the
judge and the policies.

Names are resolved on first use: the trajectory record imports
:mod:`sparring.judge.records` for :class:`TestCounts`, and that must not load the
judge's machinery (sandboxes, tasks, the test runner).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOME = {
    "JUDGE_ERROR_REASONS": "base",
    "Judge": "base",
    "JudgeResult": "base",
    "JudgeRunError": "base",
    "Usage": "base",
    "judge_error_result": "base",
    "score_with_usage": "base",
    "JudgeConfig": "pytest_judge",
    "PytestJudge": "pytest_judge",
    "PerTestReport": "records",
    "TestCounts": "records",
    "TestOutcome": "records",
}

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


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'sparring.judge' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sparring.judge.{home}"), name)
