"""Reward composition is a pure function: properties, not examples."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sparring.judge.reward import (
    CAPS,
    ZEROING_FLAGS,
    components_from_tests,
    compose_reward,
    efficiency,
    usage_efficiency,
)

names = st.sampled_from(["all_pass", "pass_fraction", "static", "efficiency"])
comps = st.dictionaries(names, st.floats(0, 1))
weights = st.dictionaries(names, st.floats(0, 2))


@given(comps, weights)
def test_reward_is_the_weighted_sum(c, w):
    assert abs(compose_reward(c, w) - sum(v * c.get(k, 0.0) for k, v in w.items())) < 1e-9


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
def test_usage_efficiency_in_unit_interval(steps, max_steps, tokens, max_tokens):
    assert 0.0 <= usage_efficiency(steps, max_steps, tokens, max_tokens) <= 1.0


def test_judge_version_is_derived_from_code_config_and_environment(backend):
    from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
    from sparring.judge.version import BASE, environment, judge_version

    a, b = PytestJudge(backend), PytestJudge(backend)
    assert a.version == b.version and a.version.startswith(BASE + "+")
    assert PytestJudge(backend, config=JudgeConfig(regression=False)).version != a.version
    assert PytestJudge(backend, config=JudgeConfig(dynamic_seed=5)).version == a.version  # seeds are per evaluation
    assert set(environment()) == {"python", "pytest", "ruff"}
    assert judge_version({"x": 1}) != judge_version({"x": 2})
