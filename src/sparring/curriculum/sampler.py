"""Curriculum: a Beta posterior of each task's pass rate, and sampling where learning happens.

Each task ``t`` keeps ``Beta(α_t, β_t)`` with ``α = α0 + passes`` and
``β = β0 + fails``. Sampling draws ``p ~ Beta(α, β)`` per task (Thompson-style)
and scores it by ``p(1-p)`` — the variance of a Bernoulli outcome, largest at
0.5, where a GRPO group is most likely to have non-zero advantage. Tasks whose
posterior mean is above ``solved`` or below ``impossible`` after ``min_obs``
observations are *parked*; parked tasks are re-tested with probability
``retest_p`` per draw.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sparring.tasks.loader import Task


@dataclass
class TaskStats:
    alpha: float = 1.0
    beta: float = 1.0
    n: int = 0

    @property
    def mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)


@dataclass
class BetaCurriculum:
    """Samples task batches from a pool; ``update`` feeds outcomes back."""

    tasks: Sequence[Task]
    seed: int = 0
    solved: float = 0.95
    impossible: float = 0.05
    min_obs: int = 8
    retest_p: float = 0.05
    stats: dict[str, TaskStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        for t in self.tasks:
            self.stats.setdefault(t.id, TaskStats())

    def parked(self, task_id: str) -> bool:
        s = self.stats[task_id]
        return s.n >= self.min_obs and (s.mean >= self.solved or s.mean <= self.impossible)

    def sample(self, k: int) -> list[Task]:
        """k distinct tasks (fewer if the pool is smaller), favouring pass rates near 0.5."""
        active = [t for t in self.tasks if not self.parked(t.id) or self.rng.random() < self.retest_p]
        if not active:
            active = list(self.tasks)
        scored = []
        for t in active:
            s = self.stats[t.id]
            p = self.rng.betavariate(s.alpha, s.beta)
            scored.append((p * (1 - p) + 1e-9 * self.rng.random(), t))
        scored.sort(key=lambda x: -x[0])
        return [t for _, t in scored[:k]]

    def update(self, outcomes: Iterable[tuple[str, bool]]) -> None:
        for task_id, passed in outcomes:
            s = self.stats.setdefault(task_id, TaskStats())
            s.alpha += 1.0 if passed else 0.0
            s.beta += 0.0 if passed else 1.0
            s.n += 1

    def metrics(self) -> dict[str, float]:
        n = len(self.tasks) or 1
        parked = sum(1 for t in self.tasks if self.parked(t.id))
        return {
            "curriculum/parked_frac": parked / n,
            "curriculum/mean_pass_posterior": sum(self.stats[t.id].mean for t in self.tasks) / n,
        }
