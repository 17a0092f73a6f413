"""How many times admission runs the reference, and which test ids it saw flake.

A hidden test that fails with probability ``q`` on each run of an unchanged
workspace slips through ``n`` independent runs, all passing, with probability
``(1 - q)^n``. Admission wants to catch such a test with probability at least
``detection``, so it runs the reference

    n = min { n >= 1 : (1 - q)^n <= 1 - detection }   (= ceil(log(1 - detection) / log(1 - q)))

times. With the stated target (``detection`` 0.999 for a test failing half the
time, ``q`` = 0.5) that is 10 runs: ``1 - 0.5^10 = 0.99902``. The guarantee
holds per test id: every id is seen on every run, and a single failure of any
id on any run of the reference rejects the task. A test failing less often
than ``q`` is caught with a lower probability; raise ``detection`` or lower
``q`` for a stricter library (the cost grows as ``log(1/(1 - detection))``).

Outcomes are tallied per test id across runs of one state (the reference, or
the initial workspace): an id seen both passing and failing is *flaky*, which
is the cause admission reports ahead of every rule such a test would
otherwise trip by chance (a non-deterministic score, a "regression").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

FLAKE_DETECTION = 0.999
"""Probability with which admission must catch a test failing at :data:`FLAKE_RATE`."""
FLAKE_RATE = 0.5
"""The per-run failure probability of the flaky test the target is stated for (half the time)."""
MISSING = "missing"


def runs_to_catch(detection: float = FLAKE_DETECTION, flake_rate: float = FLAKE_RATE) -> int:
    """Fewest runs ``n`` with ``(1 - flake_rate)^n <= 1 - detection``: a test failing with probability
    ``flake_rate`` per run passes all ``n`` runs (slips through) with probability ``1 - detection`` or less."""
    if not 0.0 < detection < 1.0 or not 0.0 < flake_rate <= 1.0:
        raise ValueError(
            f"detection must be in (0, 1) and flake_rate in (0, 1], got {detection} and {flake_rate}"
        )
    if flake_rate == 1.0:
        return 1
    n = max(1, math.ceil(math.log(1.0 - detection) / math.log(1.0 - flake_rate)))
    # The logarithms round; settle n exactly against the defining inequality.
    while n > 1 and (1.0 - flake_rate) ** (n - 1) <= 1.0 - detection:
        n -= 1
    while (1.0 - flake_rate) ** n > 1.0 - detection:
        n += 1
    return n


@dataclass(frozen=True)
class Tally:
    """Outcomes of each test id over ``runs`` runs of one state (an id absent from a run is ``missing``)."""

    runs: int
    outcomes: dict[str, tuple[str, ...]]

    def passes(self, test_id: str) -> int:
        return sum(1 for v in self.outcomes[test_id] if v == "passed")

    def flaky(self) -> list[str]:
        """Ids that passed on some runs and not on others."""
        return sorted(t for t in self.outcomes if 0 < self.passes(t) < self.runs)

    def always_passing(self) -> set[str]:
        return {t for t in self.outcomes if self.passes(t) == self.runs}

    def never_passing(self) -> list[str]:
        return sorted(t for t in self.outcomes if self.passes(t) == 0)


def tally(per_test_runs: Iterable[Mapping[str, str]]) -> Tally:
    """Tally per-test outcomes (``JudgeResult.per_test`` of each run) by test id."""
    runs = list(per_test_runs)
    ids = sorted({t for r in runs for t in r})
    return Tally(len(runs), {t: tuple(r.get(t, MISSING) for r in runs) for t in ids})
