"""Reward composition: a pure function of named components, weights and flags.

    reward = cap(flags) * Σ_k w_k · c_k

where ``c_k`` are components in [0, 1] (``all_pass``, ``pass_fraction``,
``regression``, ``lint``, ``usage``...), ``w_k`` the task's weights (components
without a weight count 0), and ``cap(flags)`` is 0 if any flag is *zeroing*
(tampering with tests or their configuration, start-up hooks, exit tricks, a
forged or missing report, a candidate that crashed or hung the test run or killed its sandbox, source
no check can parse, importable non-source files...), else the smallest cap of the *capping* flags
present (:data:`CAPS`), else 1. Components that are absent count 0, so a judge
that fails to compute one can never raise the reward.

The cost components (:data:`GATED`: ``efficiency``, the test run's wall time,
and ``usage``, the steps and tokens the agent spent) only count for a correct
answer: ``c_k`` is multiplied by ``all_pass``. Otherwise doing nothing quickly
(submitting at once, an empty diff) would earn reward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ZEROING_FLAGS: frozenset[str] = frozenset(
    {
        "test_tampering",
        "config_tampering",
        "startup_hook",
        "module_shadowing",
        "exit_trick",
        "runtime_probe",
        "eq_overload",
        "reads_judge_paths",
        "forged_report",
        "results_mismatch",
        "assertions_skipped",
        "process_exit",
        "no_test_report",
        "tests_not_run",
        "candidate_crashed",
        "candidate_timeout",
        "sandbox_killed",  # the sandbox's exec server or channel died after the candidate's code started
        "workspace_too_large",
        "workspace_unreadable",
        "workspace_changed",
        "unrepresentable_path",
        "unparseable_source",  # a changed .py file the interpreter's parser rejects: no check could read it
        "binary_module",  # native code, bytecode or an archive in the diff: importable, unreadable to the checks
        "import_shadowing",  # a workspace module offered to the tests' dependencies, or shadowing an installed one
    }
)
GATED: frozenset[str] = frozenset({"efficiency", "usage"})
"""Components that count only when ``all_pass`` is 1: cheap is good only once it is right."""
CAPS: Mapping[str, float] = {"assertion_removed": 0.5, "special_casing": 0.5, "network_attempt": 0.5}
"""Capping flags: the reward is at most this much when the flag is raised."""


def flag_cap(flags: Iterable[str], zeroing: frozenset[str] = ZEROING_FLAGS) -> float:
    """The factor the flags allow: 0 for any zeroing flag, else the smallest cap, else 1."""
    cap = 1.0
    for f in flags:
        if f in zeroing:
            return 0.0
        cap = min(cap, CAPS.get(f, 1.0))
    return cap


def compose_reward(
    components: Mapping[str, float],
    weights: Mapping[str, float],
    flags: Iterable[str] = (),
    zeroing: frozenset[str] = ZEROING_FLAGS,
) -> float:
    cap = flag_cap(flags, zeroing)
    if cap == 0.0:
        return 0.0
    correct = float(components.get("all_pass", 0.0))
    total = float(
        sum(w * float(components.get(k, 0.0)) * (correct if k in GATED else 1.0) for k, w in weights.items())
    )
    return min(total, cap * sum(max(w, 0.0) for w in weights.values())) if cap < 1.0 else total


def components_from_tests(expected: list[str], outcomes: Mapping[str, str]) -> dict[str, float]:
    """``pass_fraction`` and ``all_pass`` over the expected test ids; missing, skipped, xfailed = failed."""
    ids = expected or sorted(outcomes)
    if not ids:
        return {"pass_fraction": 0.0, "all_pass": 0.0}
    passed = sum(1 for t in ids if outcomes.get(t) == "passed")
    return {"pass_fraction": passed / len(ids), "all_pass": 1.0 if passed == len(ids) else 0.0}


def efficiency(wall_s: float, budget_s: float) -> float:
    """``1 - wall/budget`` clipped to [0, 1]: the test run's wall time (measured outside the sandbox)."""
    if budget_s <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - wall_s / budget_s))


def usage_efficiency(steps: int, max_steps: int, tokens: int = 0, max_tokens: int = 0) -> float:
    """Mean of ``1 - used/budget`` over the budgets given (steps always, tokens when ``max_tokens`` > 0)."""
    parts = [min(1.0, max(0.0, 1.0 - steps / max_steps))] if max_steps > 0 else []
    if max_tokens > 0:
        parts.append(min(1.0, max(0.0, 1.0 - tokens / max_tokens)))
    return sum(parts) / len(parts) if parts else 0.0
