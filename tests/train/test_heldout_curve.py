"""The held-out curve of a run (``eval_every``, issue 37's comparison of credit assignments): the tool
calls a batch sampled, a forked branch's shared turns counted once; a curve's points; the calls a run
needed to reach a pass rate. Pure functions on real records; the recipe's curve across a kill and a
resume is in ``test_resume.py``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparring.monitor.metrics import iteration_metrics, sampled_tool_calls
from sparring.train.config import load_config
from sparring.train.evaluation import calls_to_reach, curve_point, mean_pass_rate
from sparring.trajectory import ToolStep, Trajectory


def _turn(i: int, n_calls: int = 1) -> list[dict]:
    """An assistant turn with ``n_calls`` tool calls and their tool messages."""
    ids = [f"call_{i}_{k}" for k in range(n_calls)]
    calls = [{"id": c, "type": "function", "function": {"name": "bash", "arguments": "{}"}} for c in ids]
    return [{"role": "assistant", "content": "", "tool_calls": calls}] + [
        {"role": "tool", "tool_call_id": c, "content": ""} for c in ids
    ]


def _traj(tid: str, calls_per_turn: list[int], **kw) -> Trajectory:
    messages = [{"role": "user", "content": "do it"}]
    steps: list[ToolStep] = []
    for i, n in enumerate(calls_per_turn):
        messages += _turn(i, n)
        steps += [ToolStep(index=len(steps), tool_call_id=f"call_{i}_{k}", name="bash") for k in range(n)]
    return Trajectory(id=tid, task_id="t", task_digest="d", policy="p", status="ok", reward=1.0, messages=messages,
                      steps=steps, **kw)  # fmt: skip


def test_a_branch_counts_only_the_calls_it_sampled_past_its_branch_turn():
    root = _traj("r", [1, 1, 1])
    branch = _traj("b", [1, 1, 1], parent_id="r", branch_turn=1)  # its first turn is the root's
    late = _traj("c", [2, 1, 1], parent_id="r", branch_turn=2)  # a shared turn with two calls
    no_call = _traj("d", [1, 0], parent_id="r", branch_turn=1)  # a turn with no parsable call
    assert [sampled_tool_calls(t) for t in (root, branch, late, no_call)] == [3, 2, 1, 0]
    m = iteration_metrics([root, branch, late, no_call], 1.0)
    assert m["rollout/tool_calls"] == 3 + 3 + 4 + 1  # what the trajectories hold
    assert m["rollout/sampled_tool_calls"] == 6  # what the policy sampled


def test_curve_points_add_up_the_iterations_calls():
    rows = [{"sampled_tool_calls": 10}, {"sampled_tool_calls": 7}]
    assert curve_point([], 0.25, 0.3) == {"iteration": 0, "sampled_tool_calls": 0, "pass_rate": 0.25,
                                          "reward_mean": 0.3}  # fmt: skip
    assert (
        curve_point(rows, 0.5, 0.5)["sampled_tool_calls"] == 17
        and curve_point(rows, 0.5, 0.5)["iteration"] == 2
    )


def test_calls_to_reach_is_the_first_point_at_or_above_the_target():
    curve = [curve_point([{"sampled_tool_calls": 100}] * i, p, p) for i, p in enumerate([0.4, 0.7, 0.6, 0.8])]
    assert calls_to_reach(curve, 0.7) == 100
    assert calls_to_reach(curve, 0.75) == 300
    assert calls_to_reach(curve, 0.4) == 0  # already there before any update
    assert calls_to_reach(curve, 0.9) is None
    assert calls_to_reach(list(reversed(curve)), 0.7) == 100  # in calls order, whatever the list's


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12), st.floats(0, 1))
def test_calls_to_reach_agrees_with_a_scan(rates, target):
    curve = [curve_point([{"sampled_tool_calls": 5}] * i, p, p) for i, p in enumerate(rates)]
    got = calls_to_reach(curve, target)
    hits = [5 * i for i, p in enumerate(rates) if p >= target - 1e-9]
    assert got == (hits[0] if hits else None)


def test_mean_pass_rate_is_the_area_under_the_step_curve_over_the_budget():
    curve = [curve_point([{"sampled_tool_calls": 100}] * i, p, p) for i, p in enumerate([0.4, 0.8, 0.6])]
    assert mean_pass_rate(curve, 200) == pytest.approx((0.4 * 100 + 0.8 * 100) / 200)
    assert mean_pass_rate(curve, 50) == pytest.approx(0.4)  # the budget ends before the second point
    assert mean_pass_rate(curve, 400) == pytest.approx((40 + 80 + 0.6 * 200) / 400)  # the last point holds
    assert mean_pass_rate(list(reversed(curve)), 200) == mean_pass_rate(curve, 200)
    assert mean_pass_rate([], 100) is None and mean_pass_rate(curve, 0) is None


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12), st.integers(1, 10), st.integers(1, 200))
def test_mean_pass_rate_lies_between_the_curves_extremes(rates, step, budget):
    curve = [curve_point([{"sampled_tool_calls": step}] * i, p, p) for i, p in enumerate(rates)]
    got = mean_pass_rate(curve, budget)
    assert got is not None
    seen = rates[: min(len(rates), (budget - 1) // step + 1)]  # the points before the budget ends
    assert min(seen) - 1e-9 <= got <= max(seen) + 1e-9
    if len(set(rates)) == 1:
        assert got == pytest.approx(rates[0])


def test_eval_every_is_a_count_of_iterations():
    assert load_config(None, ["eval_every=2"]).eval_every == 2
    assert load_config(None, []).eval_every == 0
    with pytest.raises(Exception, match="eval_every"):
        load_config(None, ["eval_every=-1"])
