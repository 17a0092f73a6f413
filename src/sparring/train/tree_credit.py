"""Turn-level credit from forked rollouts (issue 37), as small pure functions.

A GRPO group is G root episodes of one task. With branch points (``rollout
--branch-at``), a root r forked after turn t has K branches that start from
r's state after t; each branch is judged on its own. Write R_x for the judged
reward of trajectory x and

    V(r, t) = mean({R_r} ∪ {R_b : b forked from r after turn t})

the Monte Carlo value of the state after turn t of r: the mean reward of the
episodes that continued from it (the root's own continuation is one of them).

The path of a trajectory x is its value points, in turn order::

    root r:    (0, μ), (t_1, V(r, t_1)), ..., (t_m, V(r, t_m)), (T_r, R_r)
    branch b:  (t_b, V(p, t_b)), ..., (T_b, R_b)           (p: the parent, t_b: its branch turn)

where μ is the mean reward of the group's roots (GRPO's baseline) and T the
trajectory's number of turns. Turn j (1-based) lies in the segment
(t_{i-1}, t_i] of its path and gets

    A_j = (v_i - v_{i-1}) / s        s = std(rewards of the group's tree) + eps
                                      (s = 1 without std normalisation, Dr. GRPO)

the value it moved to over the value it came from. A branch's turns up to its
branch turn are its parent's (credited there) and get None: not trained twice.
Where no branch point lies the path is (0, μ) → (T, R) and A_j = (R - μ) / s
for every turn, GRPO's episode advantage; with no branch point anywhere the
tree is the roots alone and this is exactly
:func:`sparring.train.advantages.group_advantages` (a property test checks it,
bit for bit). A tree whose rewards are all equal carries no signal: all zeros.

:data:`CREDITS` is the registry the trainer picks from (``credit: flat`` or
``credit: tree`` in the training config).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from sparring.train.advantages import grouped_advantages, mean_std, no_signal


@dataclass(frozen=True)
class Node:
    """What credit needs of one judged trajectory."""

    id: str
    group: Hashable
    reward: float
    turns: int
    parent_id: str | None = None
    branch_turn: int | None = None


TurnAdvantages = dict[str, list[float | None]]
"""Trajectory id -> one advantage per turn (None: not this trajectory's turn to train)."""


def _scale(rewards: Sequence[float], normalize_std: bool, eps: float) -> float | None:
    """GRPO's divisor over ``rewards`` (None: zero variance, no signal), computed as group_advantages does."""
    if no_signal(rewards):
        return None
    return mean_std(rewards)[1] + eps if normalize_std else 1.0


def branch_values(nodes: Sequence[Node]) -> dict[tuple[str, int], float]:
    """V(r, t) for every branch point: the mean reward of the parent and its branches forked after t."""
    by_id = {n.id: n for n in nodes}
    below: dict[tuple[str, int], list[float]] = {}
    for n in nodes:
        if n.parent_id is not None and n.branch_turn is not None and n.parent_id in by_id:
            below.setdefault((n.parent_id, n.branch_turn), []).append(n.reward)
    return {(pid, t): (by_id[pid].reward + math.fsum(rs)) / (1 + len(rs)) for (pid, t), rs in below.items()}


def _segment_advantages(path: list[tuple[int, float]], turns: int, scale: float) -> list[float | None]:
    out: list[float | None] = [None] * turns
    for (t0, v0), (t1, v1) in zip(path, path[1:], strict=False):
        a = (v1 - v0) / scale if scale != 1.0 else v1 - v0
        for j in range(t0, min(t1, turns)):  # turns t0+1 .. t1, 0-based j
            out[j] = a
    return out


def tree_advantages(
    nodes: Sequence[Node], *, normalize_std: bool = True, eps: float = 1e-6
) -> TurnAdvantages:
    """Per-turn advantages of every node (formula in the module docstring)."""
    groups: dict[Hashable, list[Node]] = {}
    for n in nodes:
        groups.setdefault(n.group, []).append(n)
    values = branch_values(nodes)
    by_id = {n.id: n for n in nodes}
    out: TurnAdvantages = {}
    for members in groups.values():
        roots = [n for n in members if n.parent_id is None]
        orphans = [n for n in members if n.parent_id is not None and n.parent_id not in by_id]
        out.update(
            {n.id: [None] * n.turns for n in orphans}
        )  # its parent is not in the batch: no value to start from
        tree = [n for n in members if n not in orphans]
        if not roots:
            continue
        scale = _scale([n.reward for n in tree], normalize_std, eps)
        mean = math.fsum(float(n.reward) for n in roots) / len(roots)
        root_ids = {n.id for n in roots}
        for n in tree:
            if scale is None:
                out[n.id] = [0.0] * n.turns
                continue
            if n.id in root_ids:
                start = (0, mean)
            else:
                assert n.parent_id is not None and n.branch_turn is not None
                start = (n.branch_turn, values[(n.parent_id, n.branch_turn)])
            points = sorted((t, v) for (pid, t), v in values.items() if pid == n.id and t > start[0])
            path = [start, *points, (max(n.turns, start[0]), float(n.reward))]
            out[n.id] = _segment_advantages(path, n.turns, scale)
    return out


def flat_advantages(
    nodes: Sequence[Node], *, normalize_std: bool = True, eps: float = 1e-6
) -> TurnAdvantages:
    """GRPO: every turn of a root gets its episode advantage; branches are not trained (None)."""
    roots = [n for n in nodes if n.parent_id is None]
    advs = grouped_advantages([n.group for n in roots], [n.reward for n in roots], normalize_std=normalize_std,
                              eps=eps)  # fmt: skip
    out: TurnAdvantages = {n.id: [a] * n.turns for n, a in zip(roots, advs, strict=True)}
    out.update({n.id: [None] * n.turns for n in nodes if n.parent_id is not None})
    return out


CreditFn = Callable[..., TurnAdvantages]
CREDITS: dict[str, CreditFn] = {"flat": flat_advantages, "tree": tree_advantages}
"""Credit assignment by name: ``flat`` (GRPO's episode advantage) or ``tree`` (from forked rollouts)."""


def get_credit(name: str) -> CreditFn:
    try:
        return CREDITS[name]
    except KeyError:
        raise ValueError(f"unknown credit {name!r} (one of: {', '.join(sorted(CREDITS))})") from None
