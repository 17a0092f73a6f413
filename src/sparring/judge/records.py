"""The judge's result records that cross rooms: test counts and the per-test report.

They live apart from :mod:`sparring.judge.base` (which also holds the Judge
protocol, typed over tasks and sandboxes) so that plain data holders such as
:class:`sparring.trajectory.Trajectory` can carry a judge's verdict without
importing any judge machinery.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

PROCESS_PREFIX = "process/"
"""Components and flags of the process checks (:mod:`sparring.judge.process`) start with this."""

TestOutcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed", "missing"]
"""One hidden test's outcome in a per-test report; only ``passed`` counts as a pass."""

PerTestReport = dict[str, str]
"""test id -> :data:`TestOutcome` (kept ``str`` so reports from older judge versions still load)."""


class TestCounts(BaseModel):
    """How many hidden tests passed, failed and errored in one judged run."""

    model_config = ConfigDict(extra="forbid")

    passed: int = 0
    failed: int = 0
    errors: int = 0
