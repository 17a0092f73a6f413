"""A per-episode measure of "look before acting": what RL changed, not only the pass rate.

An episode *looks first* when its first tool call is an inspection (which
calls are, the family says: e.g.
:func:`sparring.tasks.families.shell_look.is_inspection`). Over a set of
judged episodes::

    inspect_first    = #looked-first / #episodes
    pass_if_inspect  = #passed and looked-first / #looked-first     (None if none looked)
    pass_if_not      = #passed and not looked-first / #not          (None if all looked)

so ``pass_rate = inspect_first * pass_if_inspect + (1 - inspect_first) * pass_if_not``:
a pass rate that rises with ``inspect_first`` at a steady ``pass_if_inspect`` is the
skill being learnt; one that rises inside a branch is something else (the act itself).
Only judged episodes count (an infrastructure fault says nothing about the policy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sparring.trajectory import Trajectory

Inspection = Callable[[str, "dict[str, Any] | None"], bool]  # (tool name, arguments) -> looks without acting

KEYS = ("episodes", "inspect_first", "pass_if_inspect", "pass_if_not")


def looked_first(traj: Trajectory, is_inspection: Inspection) -> bool:
    """The episode's first tool call is an inspection (an episode without tool calls did not look)."""
    return bool(traj.steps) and is_inspection(traj.steps[0].name, traj.steps[0].arguments)


def _rate(passed: list[bool]) -> float | None:
    return sum(passed) / len(passed) if passed else None


def look_skill(trajs: Sequence[Trajectory], is_inspection: Inspection) -> dict[str, float | None]:
    """``{episodes, inspect_first, pass_if_inspect, pass_if_not}`` over the judged episodes of ``trajs``."""
    judged = [t for t in trajs if t.trainable]
    looked = [t.passed for t in judged if looked_first(t, is_inspection)]
    guessed = [t.passed for t in judged if not looked_first(t, is_inspection)]
    return {
        "episodes": float(len(judged)),
        "inspect_first": len(looked) / len(judged) if judged else None,
        "pass_if_inspect": _rate(looked),
        "pass_if_not": _rate(guessed),
    }


def skill_metrics(prefix: str, skill: dict[str, float | None]) -> dict[str, float]:
    """The measure as metric rows (``{prefix}/inspect_first``...), leaving out the undefined ones."""
    return {f"{prefix}/{k}": v for k, v in skill.items() if v is not None}


__all__ = ["KEYS", "Inspection", "look_skill", "looked_first", "skill_metrics"]
