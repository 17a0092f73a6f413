"""Group-relative advantages: the GRPO / Dr. GRPO formulas and their invariances."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sparring.train.advantages import group_advantages, grouped_advantages, zero_std_groups

# rewards on a 1e-3 grid, like weighted sums of judge components; keeps float noise far below the spread
_reward = st.integers(-10_000, 10_000).map(lambda k: k / 1000)
_group = st.lists(_reward, min_size=1, max_size=16)


def _spread(rs):
    return max(rs) - min(rs)


def test_grpo_formula_on_a_known_group():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], eps=0.0)
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0])
    assert group_advantages([1.0, 0.0, 0.0, 0.0], normalize_std=False) == pytest.approx(
        [0.75, -0.25, -0.25, -0.25]
    )


def test_empty_and_singleton_groups():
    assert group_advantages([]) == []
    assert group_advantages([0.7]) == [0.0]


def test_grouped_advantages_respects_groups_and_order():
    adv = grouped_advantages(["a", "b", "a", "b", "c"], [1.0, 5.0, 0.0, 5.0, 2.0], normalize_std=False)
    assert adv == pytest.approx([0.5, 0.0, -0.5, 0.0, 0.0])
    with pytest.raises(ValueError):
        grouped_advantages(["a"], [1.0, 2.0])


def test_zero_std_groups_counts_groups_without_signal():
    assert zero_std_groups(["a", "a", "b", "b", "c"], [1, 1, 0, 1, 3]) == (2, 3)


@settings(max_examples=200, deadline=None)
@given(rs=_group, normalize=st.booleans())
def test_advantages_sum_to_zero(rs, normalize):
    adv = group_advantages(rs, normalize_std=normalize)
    assert math.fsum(adv) == pytest.approx(0.0, abs=1e-6 * len(rs))


@settings(max_examples=200, deadline=None)
@given(r=_reward, n=st.integers(1, 16), normalize=st.booleans())
def test_zero_variance_group_gets_all_zeros(r, n, normalize):
    assert group_advantages([r] * n, normalize_std=normalize) == [0.0] * n


@settings(max_examples=200, deadline=None)
@given(rs=_group, c=_reward, normalize=st.booleans())
def test_invariant_to_adding_a_constant(rs, c, normalize):
    a = group_advantages(rs, normalize_std=normalize)
    b = group_advantages([r + c for r in rs], normalize_std=normalize)
    assert b == pytest.approx(a, abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(rs=_group, k=st.integers(1, 1000).map(lambda k: k / 10))
def test_normalised_advantages_are_scale_invariant(rs, k):
    assume(_spread(rs) > 0)
    a = group_advantages(rs, eps=0.0)
    b = group_advantages([r * k for r in rs], eps=0.0)
    assert b == pytest.approx(a, rel=1e-6, abs=1e-6)
    # and they have unit population variance
    assert math.fsum(x * x for x in a) / len(a) == pytest.approx(1.0, rel=1e-6)


@settings(max_examples=200, deadline=None)
@given(rs=_group, k=st.integers(1, 1000).map(lambda k: k / 10))
def test_dr_grpo_advantages_scale_with_rewards(rs, k):
    a = group_advantages(rs, normalize_std=False)
    b = group_advantages([r * k for r in rs], normalize_std=False)
    assert b == pytest.approx([x * k for x in a], abs=1e-6 * k)


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from("abcd"), _reward), max_size=30), normalize=st.booleans())
def test_grouped_equals_per_group(pairs, normalize):
    gids = [g for g, _ in pairs]
    rewards = [r for _, r in pairs]
    out = grouped_advantages(gids, rewards, normalize_std=normalize)
    for g in set(gids):
        idx = [i for i, x in enumerate(gids) if x == g]
        assert [out[i] for i in idx] == group_advantages([rewards[i] for i in idx], normalize_std=normalize)


@pytest.mark.parametrize(
    "rewards",
    [[], [0.7], [0.1, 0.1, 0.1], [0.0, 1.0], [0.5, 0.5 + 1e-13], [1e6, 1e6 + 1e-7], [3.0, 3.0, 3.0 + 1e-3]],
)
def test_one_zero_variance_rule_for_advantages_tree_credit_metrics_and_resampling(rewards):
    """advantages, tree credit's scale, the zero-std metric and the recipe's dynamic sampling all
    decide "no signal" with :func:`no_signal` (issue 36): before, the recipe kept [1e6, 1e6 + 1e-7],
    a group whose advantages were all zero."""
    from sparring.train.advantages import no_signal
    from sparring.train.sampling import zero_variance_groups
    from sparring.train.tree_credit import _scale
    from sparring.trajectory import Trajectory

    dead = no_signal(rewards)
    assert dead == (not any(group_advantages(rewards)))
    if rewards:
        assert dead == (_scale(rewards, True, 1e-6) is None)
        assert zero_std_groups(["g"] * len(rewards), rewards) == (int(dead), 1)
    trajs = [
        Trajectory(task_id="t", task_digest="d", policy="p", status="ok", group_id="g", reward=r)
        for r in rewards
    ]
    assert bool(zero_variance_groups(trajs)) == (dead and bool(rewards))
