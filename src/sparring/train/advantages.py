"""Group-relative advantages (GRPO and Dr. GRPO), as small pure functions.

GRPO samples a group of G rollouts of the same task and uses the group as its
own baseline instead of a learned value function. For rewards r_1..r_G::

    GRPO     A_i = (r_i - mean(r)) / (std(r) + eps)
    Dr.GRPO  A_i =  r_i - mean(r)                      (normalize_std=False)

std is the population standard deviation (ddof=0). A group whose rewards are
all equal (std == 0: every sample passed, or every sample failed) carries no
learning signal; its advantages are exactly zero, so it adds nothing to the
policy gradient (DAPO's dynamic sampling drops such groups and samples others).

Dr. GRPO (Liu et al., 2025) drops the std division because it up-weights
groups with tiny reward spread (nearly solved or nearly impossible tasks),
biasing the update; without it, advantages keep the reward's scale.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence


def mean_std(rewards: Sequence[float]) -> tuple[float, float]:
    """The mean and population standard deviation (ddof=0) of a non-empty group's rewards."""
    r = [float(x) for x in rewards]
    mean = math.fsum(r) / len(r)
    return mean, math.sqrt(math.fsum((x - mean) * (x - mean) for x in r) / len(r))


def no_signal(rewards: Sequence[float]) -> bool:
    """The one zero-variance rule: True when a group carries no learning signal.

    That is fewer than two rewards, or a spread below float noise of the mean
    (e.g. ``[0.1, 0.1, 0.1]`` after rounding). Advantages, tree credit, the
    zero-std metric and the recipe's dynamic sampling all ask this function.
    """
    if len(rewards) < 2:
        return True
    mean, std = mean_std(rewards)
    return std <= 1e-12 * max(1.0, abs(mean))


def group_advantages(
    rewards: Sequence[float], *, normalize_std: bool = True, eps: float = 1e-6
) -> list[float]:
    """Advantages of one group: ``(r - mean) / (std + eps)``, or ``r - mean`` without normalisation.

    Zero-variance groups (including a group of one) get all-zero advantages.
    """
    n = len(rewards)
    if no_signal(rewards):
        return [0.0] * n
    mean, std = mean_std(rewards)
    centered = [float(x) - mean for x in rewards]
    if not normalize_std:
        return centered
    return [c / (std + eps) for c in centered]


def grouped_advantages(
    group_ids: Sequence[Hashable],
    rewards: Sequence[float],
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """:func:`group_advantages` applied within each group id; output aligned with the inputs."""
    if len(group_ids) != len(rewards):
        raise ValueError(f"group_ids and rewards differ in length ({len(group_ids)} != {len(rewards)})")
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(group_ids):
        members.setdefault(g, []).append(i)
    out = [0.0] * len(rewards)
    for idx in members.values():
        for i, a in zip(
            idx,
            group_advantages([rewards[i] for i in idx], normalize_std=normalize_std, eps=eps),
            strict=True,
        ):
            out[i] = a
    return out


def zero_std_groups(group_ids: Sequence[Hashable], rewards: Sequence[float]) -> tuple[int, int]:
    """(groups whose rewards are all equal, all groups): the fraction with no learning signal."""
    members: dict[Hashable, list[float]] = {}
    for g, r in zip(group_ids, rewards, strict=True):
        members.setdefault(g, []).append(float(r))
    zero = sum(1 for rs in members.values() if no_signal(rs))
    return zero, len(members)
