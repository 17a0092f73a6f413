"""Reward composition is a pure function: properties, not examples."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sparring.judge.reward import (
    CAPS,
    GATED,
    ZEROING_FLAGS,
    components_from_tests,
    compose_reward,
    efficiency,
    usage_efficiency,
)

names = st.sampled_from(["all_pass", "pass_fraction", "static", "efficiency", "usage"])
comps = st.dictionaries(names, st.floats(0, 1))
weights = st.dictionaries(names, st.floats(0, 2))


@given(comps, weights)
def test_reward_is_the_weighted_sum(c, w):
    gate = c.get("all_pass", 0.0)
    expected = sum(v * c.get(k, 0.0) * (gate if k in GATED else 1.0) for k, v in w.items())
    assert abs(compose_reward(c, w) - expected) < 1e-9


@given(comps, weights, st.floats(0, 1))
def test_cost_components_pay_nothing_without_a_correct_answer(c, w, u):
    """Doing nothing cheaply (few steps, fast tests) earns nothing: usage and efficiency need all_pass."""
    c = {**c, "all_pass": 0.0}
    assert compose_reward({**c, "usage": u, "efficiency": u}, w) == compose_reward(
        {k: v for k, v in c.items() if k not in GATED}, w
    )


@given(comps, weights, st.floats(0, 1), st.floats(0, 1))
def test_spending_less_never_lowers_a_correct_answers_reward(c, w, u1, u2):
    c = {**c, "all_pass": 1.0}
    lo, hi = sorted((u1, u2))
    assert compose_reward({**c, "usage": lo}, w) <= compose_reward({**c, "usage": hi}, w) + 1e-9
    # no weight on usage (every family's default): usage changes nothing
    w0 = {k: v for k, v in w.items() if k != "usage"}
    assert compose_reward({**c, "usage": lo}, w0) == compose_reward({**c, "usage": hi}, w0)


@given(comps, weights, st.sampled_from(sorted(ZEROING_FLAGS)))
def test_zeroing_flag_zeroes(c, w, flag):
    assert compose_reward(c, w, [flag]) == 0.0


@given(comps, weights, st.text(min_size=1).filter(lambda s: s not in ZEROING_FLAGS and s not in CAPS))
def test_other_flags_do_not_change_reward(c, w, flag):
    assert compose_reward(c, w, [flag]) == compose_reward(c, w)


@given(st.lists(st.text(min_size=1), min_size=1, max_size=20, unique=True), st.data())
def test_missing_and_skipped_tests_count_as_failed(ids, data):
    outcomes = {
        t: data.draw(st.sampled_from(["passed", "failed", "skipped", "error"]))
        for t in ids
        if data.draw(st.booleans())
    }
    c = components_from_tests(ids, outcomes)
    passed = sum(1 for t in ids if outcomes.get(t) == "passed")
    assert c["pass_fraction"] == passed / len(ids)
    assert c["all_pass"] == (1.0 if passed == len(ids) else 0.0)


def test_no_tests_scores_zero():
    assert components_from_tests([], {}) == {"pass_fraction": 0.0, "all_pass": 0.0}


@given(comps, weights, st.sampled_from(sorted(CAPS)))
def test_capping_flag_caps_at_its_share_of_the_best_reward(c, w, flag):
    full = sum(max(v, 0.0) for v in w.values())
    r = compose_reward(c, w, [flag])
    assert r <= CAPS[flag] * full + 1e-9 and r <= compose_reward(c, w) + 1e-9


@given(
    comps, weights, st.lists(st.sampled_from(sorted({*ZEROING_FLAGS, *CAPS, "symlinks_ignored"})), max_size=4)
)
def test_flags_never_raise_the_reward(c, w, flags):
    assert compose_reward(c, w, flags) <= compose_reward(c, w) + 1e-9


@given(st.floats(0, 100), st.floats(0.001, 100))
def test_efficiency_is_in_unit_interval_and_monotone(wall, budget):
    e = efficiency(wall, budget)
    assert 0.0 <= e <= 1.0 and efficiency(wall + 1, budget) <= e


@given(st.integers(0, 100), st.integers(1, 100), st.integers(0, 10_000), st.integers(0, 10_000))
def test_usage_efficiency_in_unit_interval_and_monotone(steps, max_steps, tokens, max_tokens):
    u = usage_efficiency(steps, max_steps, tokens, max_tokens)
    assert 0.0 <= u <= 1.0
    assert usage_efficiency(steps + 1, max_steps, tokens, max_tokens) <= u
    assert usage_efficiency(steps, max_steps, tokens + 1, max_tokens) <= u


def _with_weights(task, tmp_path, extra: str):
    import shutil

    from sparring.tasks.loader import load_task

    dst = tmp_path / task.id
    shutil.copytree(task.path, dst)
    toml = (dst / "task.toml").read_text()
    assert "[judge.weights]\nall_pass = 1.0\n" in toml
    (dst / "task.toml").write_text(
        toml.replace("[judge.weights]\nall_pass = 1.0\n", "[judge.weights]\nall_pass = 1.0\n" + extra)
    )
    return load_task(dst)


def test_judge_scores_usage_only_when_given_and_weighted(backend, family_tasks, tmp_path):
    import asyncio

    import pytest

    from sparring.judge.base import Usage, score_with_usage
    from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
    from sparring.sandbox.base import WorkspaceDiff
    from sparring.tasks.loader import solution_diff

    judge = PytestJudge(backend, config=JudgeConfig(dynamic_seed=1, shuffle_seed=1, tokens_per_step=100))
    plain = family_tasks["function-impl"]
    task = _with_weights(plain, tmp_path, "usage = 0.5\n")
    ref = solution_diff(task)
    without = asyncio.run(judge.score(task, ref))
    assert "usage" not in without.components and without.reward == 1.0  # an old caller: nothing changes
    max_steps = task.spec.limits.max_steps
    r = asyncio.run(judge.score(task, ref, usage=Usage(steps=4, tokens=300)))
    want = usage_efficiency(4, max_steps, 300, max_steps * 100)
    assert r.components["usage"] == pytest.approx(want, abs=1e-6)
    assert r.reward == pytest.approx(1.0 + 0.5 * want, abs=1e-6)
    assert r.metrics["usage_steps"] == 4 and r.metrics["usage_tokens"] == 300
    lean = asyncio.run(judge.score(task, ref, usage=Usage(steps=1, tokens=10)))
    assert lean.reward > r.reward  # fewer steps and tokens, same correct answer: more reward
    idle = asyncio.run(judge.score(task, WorkspaceDiff(), usage=Usage(steps=0)))
    assert idle.components["usage"] == 1.0 and idle.reward == 0.0  # cheap but wrong earns nothing
    # the task's default weights (all_pass only): usage is stored, the reward does not move
    d = asyncio.run(judge.score(plain, ref, usage=Usage(steps=4, tokens=300)))
    assert "usage" in d.components and d.reward == 1.0

    class OldJudge:  # a judge written before usage existed keeps working
        version = "old"

        async def score(self, task, diff):
            return without

    assert asyncio.run(score_with_usage(OldJudge(), task, ref, Usage(steps=3))) is without
    with pytest.raises(ValueError):
        Usage(steps=-1)


def test_judge_version_is_derived_from_code_config_and_environment(backend):
    from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
    from sparring.judge.version import BASE, environment, judge_version

    a, b = PytestJudge(backend), PytestJudge(backend)
    assert a.version == b.version and a.version.startswith(BASE + "+")
    assert PytestJudge(backend, config=JudgeConfig(regression=False)).version != a.version
    assert (
        PytestJudge(backend, config=JudgeConfig(dynamic_seed=5)).version == a.version
    )  # seeds are per evaluation
    assert set(environment()) == {"python", "pytest", "ruff"}
    assert judge_version({"x": 1}) != judge_version({"x": 2})
