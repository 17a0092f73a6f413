"""The look-before-acting measure on hand-built trajectories: shares and conditional pass rates
counted by hand, unjudged episodes left out, and the pass rate recomposed from its two branches."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparring.monitor.skill import look_skill, looked_first, skill_metrics
from sparring.tasks.families.shell_look import is_inspection
from sparring.trajectory import ToolStep, Trajectory

LOOK = ("bash", {"command": "ls"})
ACT = ("bash", {"command": "sort notes.txt > out.txt"})


def _traj(calls: list[tuple[str, dict[str, Any]]], passed: bool, status: str = "ok") -> Trajectory:
    judged = status in ("ok", "truncated", "timeout")
    return Trajectory(
        task_id="t", task_digest="d", policy="p", status=status,
        reward=(1.0 if passed else 0.0) if judged else None,
        components={"all_pass": 1.0 if passed else 0.0} if judged else {},
        steps=[ToolStep(index=i, tool_call_id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)],
    )  # fmt: skip


def test_by_hand() -> None:
    trajs = [
        _traj([LOOK, ACT, ("submit", {})], True),
        _traj([LOOK, ACT, ("submit", {})], False),
        _traj([ACT, ("submit", {})], True),
        _traj([ACT, ("submit", {})], False),
        _traj([ACT, ("submit", {})], False),
        _traj([ACT, LOOK], False),  # looked only after acting: not a look first
        _traj([], False),  # no tool call at all
        _traj([LOOK], True, status="infra_error"),  # unjudged: not an episode of the policy
    ]
    s = look_skill(trajs, is_inspection)
    assert s == {"episodes": 7.0, "inspect_first": 2 / 7, "pass_if_inspect": 0.5, "pass_if_not": 1 / 5}
    assert skill_metrics("x", s) == {f"x/{k}": v for k, v in s.items()}


def test_undefined_branches_are_none_and_left_out_of_metrics() -> None:
    s = look_skill([_traj([LOOK, ACT], True)], is_inspection)
    assert s["pass_if_not"] is None and s["inspect_first"] == 1.0
    assert "x/pass_if_not" not in skill_metrics("x", s)
    empty = look_skill([], is_inspection)
    assert empty == {"episodes": 0.0, "inspect_first": None, "pass_if_inspect": None, "pass_if_not": None}


EPISODE = st.tuples(
    st.lists(st.sampled_from([LOOK, ACT, ("submit", {}), ("list_dir", {})]), max_size=4),
    st.booleans(),
    st.sampled_from(["ok", "truncated", "timeout", "infra_error", "policy_error"]),
)


@given(st.lists(EPISODE, max_size=40))
def test_shares_count_episodes_and_recompose_the_pass_rate(episodes: list[Any]) -> None:
    trajs = [_traj(calls, passed, status) for calls, passed, status in episodes]
    s = look_skill(trajs, is_inspection)
    judged = [
        (calls, passed) for calls, passed, status in episodes if status in ("ok", "truncated", "timeout")
    ]
    looks = [p for calls, p in judged if calls and calls[0][0] in ("bash", "list_dir") and calls[0] != ACT]
    assert s["episodes"] == len(judged)
    assert [looked_first(t, is_inspection) for t in trajs if t.trainable] == [
        bool(c) and c[0] != ACT and c[0][0] != "submit" for c, _ in judged
    ]
    if not judged:
        assert s["inspect_first"] is None
        return
    share = s["inspect_first"]
    assert share == pytest.approx(len(looks) / len(judged))
    pass_rate = sum(p for _, p in judged) / len(judged)
    recomposed = share * (s["pass_if_inspect"] or 0.0) + (1 - share) * (s["pass_if_not"] or 0.0)  # type: ignore[operator]
    assert recomposed == pytest.approx(pass_rate)
    assert (s["pass_if_inspect"] is None) == (not looks)
