"""Reward composition: a pure function of named components, weights and flags.

    reward = cap(flags) * Σ_k w_k · c_k

where ``c_k`` are components in [0, 1] (``all_pass``, ``pass_fraction``, ...),
``w_k`` the task's weights (components without a weight count 0), and
``cap(flags)`` is 0 if any flag is *zeroing* (tampering with tests, a missing
test report), else 1. Components that are absent count 0, so a judge that
fails to compute one can never raise the reward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ZEROING_FLAGS: frozenset[str] = frozenset({"test_tampering", "no_test_report", "tests_not_run"})


def compose_reward(
    components: Mapping[str, float],
    weights: Mapping[str, float],
    flags: Iterable[str] = (),
    zeroing: frozenset[str] = ZEROING_FLAGS,
) -> float:
    if any(f in zeroing for f in flags):
        return 0.0
    return float(sum(w * float(components.get(k, 0.0)) for k, w in weights.items()))


def components_from_tests(expected: list[str], outcomes: Mapping[str, str]) -> dict[str, float]:
    """``pass_fraction`` and ``all_pass`` over the expected test ids; missing or skipped = failed."""
    ids = expected or sorted(outcomes)
    if not ids:
        return {"pass_fraction": 0.0, "all_pass": 0.0}
    passed = sum(1 for t in ids if outcomes.get(t) == "passed")
    return {"pass_fraction": passed / len(ids), "all_pass": 1.0 if passed == len(ids) else 0.0}
