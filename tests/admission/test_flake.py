"""The reference-run count admission derives from its flake target, and the per-test tally."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparring.admission.check import REFERENCE_RUNS
from sparring.admission.flake import FLAKE_DETECTION, FLAKE_RATE, runs_to_catch, tally


def test_the_stated_target_needs_ten_runs() -> None:
    # 1 - 0.5^9 = 0.998 < 0.999 <= 1 - 0.5^10 = 0.99902
    assert (FLAKE_DETECTION, FLAKE_RATE) == (0.999, 0.5)
    assert runs_to_catch() == REFERENCE_RUNS == 10


@given(
    detection=st.floats(min_value=1e-6, max_value=1 - 1e-12),
    rate=st.floats(min_value=1e-3, max_value=1.0),
)
def test_runs_are_the_fewest_that_reach_the_detection_probability(detection: float, rate: float) -> None:
    n = runs_to_catch(detection, rate)
    assert n >= 1
    # P(a test failing at `rate` passes all n runs) is at most 1 - detection, and n - 1 runs are not enough
    assert (1 - rate) ** n <= 1 - detection
    assert n == 1 or (1 - rate) ** (n - 1) > 1 - detection


@given(
    detection=st.floats(min_value=0.5, max_value=1 - 1e-9),
    rate=st.floats(min_value=0.01, max_value=0.99),
    more=st.floats(min_value=0.0, max_value=0.99),
)
def test_a_stricter_target_never_needs_fewer_runs(detection: float, rate: float, more: float) -> None:
    stricter = detection + (1 - detection) * more
    assert runs_to_catch(stricter, rate) >= runs_to_catch(detection, rate)
    assert runs_to_catch(detection, rate / 2) >= runs_to_catch(detection, rate)


def test_exact_powers_are_not_rounded_up() -> None:
    assert runs_to_catch(0.75, 0.5) == 2  # log(0.25)/log(0.5) is 2.0000000000000004 in floats
    assert runs_to_catch(1 - 0.5**20, 0.5) == 20
    assert runs_to_catch(0.999, 1.0) == 1
    assert runs_to_catch(0.99, 0.1) == math.ceil(math.log(0.01) / math.log(0.9))


@pytest.mark.parametrize(("detection", "rate"), [(0.0, 0.5), (1.0, 0.5), (0.9, 0.0), (0.9, 1.5)])
def test_targets_outside_the_open_interval_are_refused(detection: float, rate: float) -> None:
    with pytest.raises(ValueError, match="detection must be in"):
        runs_to_catch(detection, rate)


def test_tally_counts_each_id_over_every_run_and_a_missing_id_as_not_passing() -> None:
    t = tally(
        [
            {"a": "passed", "b": "passed", "c": "failed"},
            {"a": "passed", "b": "failed", "c": "failed"},
            {"a": "passed", "c": "failed"},  # b was not even reported: missing
        ]
    )
    assert t.runs == 3 and t.outcomes["b"] == ("passed", "failed", "missing")
    assert (t.passes("a"), t.passes("b"), t.passes("c")) == (3, 1, 0)
    assert t.flaky() == ["b"]
    assert t.always_passing() == {"a"} and t.never_passing() == ["c"]
