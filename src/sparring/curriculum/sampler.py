"""Curriculum: a Beta posterior of each task's pass rate, and sampling where learning happens.

Each task ``t`` keeps ``Beta(α_t, β_t)`` with ``α = α0 + passes`` and
``β = β0 + fails`` (optionally discounted by ``decay`` per update, so a task
the policy has since learned is not judged by its old failures). Sampling
draws ``p ~ Beta(α, β)`` per task (Thompson-style) and scores it by
``p(1-p)``: the variance of a Bernoulli outcome, largest at 0.5, where a GRPO
group is most likely to have non-zero advantage (online difficulty filtering
finds learning fastest there).

Parking: a task whose posterior mean is at least ``solved`` or at most
``impossible`` after ``min_obs`` observations is parked; each draw re-tests a
parked task with probability ``retest_p`` (the policy may have learned it, or
forgotten it). Balance: the ``k`` slots of a batch are dealt round-robin over
the (family, tier) strata that still have active tasks, so one easy family
cannot crowd out the rest. Dynamic sampling: :meth:`replacements` hands out
fresh tasks for groups that came back with zero reward variance, instead of
failing or shrinking the batch.

Everything the sampler knows is in :meth:`state_dict` (posteriors, counters,
RNG state), so a resumed run samples exactly what an uninterrupted one would.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sparring.tasks.loader import Task


@dataclass
class TaskStats:
    alpha: float = 1.0
    beta: float = 1.0
    n: int = 0
    passes: int = 0

    @property
    def mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)


def stratum(task: Task) -> tuple[str, int]:
    """The (family, tier) a task is balanced within."""
    spec = getattr(task, "spec", None)
    return (getattr(spec, "family", ""), int(getattr(spec, "difficulty", 0)))


@dataclass
class BetaCurriculum:
    """Samples task batches from a pool; ``update`` feeds judged outcomes back."""

    tasks: Sequence[Task]
    seed: int = 0
    solved: float = 0.95
    impossible: float = 0.05
    min_obs: int = 8
    retest_p: float = 0.05
    prior: tuple[float, float] = (1.0, 1.0)
    decay: float = 1.0
    balance: bool = True
    stats: dict[str, TaskStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.impossible < self.solved <= 1:
            from sparring.errors import ConfigError

            raise ConfigError(f"need 0 <= impossible < solved <= 1, got {self.impossible}, {self.solved}")
        self.rng = random.Random(self.seed)
        self.by_id = {t.id: t for t in self.tasks}
        for t in self.tasks:
            self.stats.setdefault(t.id, TaskStats(*self.prior))
        self.counters: Counter[str] = Counter()
        self.sampled: Counter[str] = Counter()  # per stratum "family/tier"

    # ------------------------------------------------------------------ state

    def parked(self, task_id: str) -> bool:
        s = self.stats[task_id]
        return s.n >= self.min_obs and (s.mean >= self.solved or s.mean <= self.impossible)

    def _score(self, t: Task) -> float:
        s = self.stats[t.id]
        p = self.rng.betavariate(s.alpha, s.beta)
        return p * (1 - p) + 1e-9 * self.rng.random()

    # ------------------------------------------------------------------ sampling

    def sample(self, k: int, exclude: Iterable[str] = ()) -> list[Task]:
        """Up to k distinct tasks (fewer if the pool is smaller), favouring pass rates near 0.5."""
        skip = set(exclude)
        pool = [t for t in self.tasks if t.id not in skip]
        active: list[Task] = []
        for t in pool:
            if not self.parked(t.id):
                active.append(t)
            elif self.rng.random() < self.retest_p:
                active.append(t)
                self.counters["retests"] += 1
        if not active:  # everything parked: re-test rather than stall
            active = list(pool)
            self.counters["all_parked"] += 1
        scored = sorted(((self._score(t), t) for t in active), key=lambda x: -x[0])
        if not self.balance:
            chosen = [t for _, t in scored[:k]]
        else:
            strata: dict[tuple[str, int], list[Task]] = defaultdict(list)
            for _, t in scored:
                strata[stratum(t)].append(t)
            order = sorted(strata, key=lambda s: (self.sampled[f"{s[0]}/{s[1]}"], s))  # least served first
            chosen = []
            while len(chosen) < k and any(strata[s] for s in order):
                for s in order:
                    if strata[s] and len(chosen) < k:
                        chosen.append(strata[s].pop(0))
        for t in chosen:
            fam, tier = stratum(t)
            self.sampled[f"{fam}/{tier}"] += 1
        return chosen

    def replacements(self, k: int, exclude: Iterable[str]) -> list[Task]:
        """Fresh tasks for k zero-variance groups (never ones already in this batch)."""
        out = self.sample(k, exclude)
        self.counters["replaced_groups"] += len(out)
        return out

    def update(self, outcomes: Iterable[tuple[str, bool]]) -> None:
        """Feed (task id, passed) outcomes; unknown ids are added to the posterior table."""
        touched: dict[str, list[bool]] = defaultdict(list)
        for task_id, passed in outcomes:
            touched[task_id].append(bool(passed))
        for task_id, results in touched.items():
            s = self.stats.setdefault(task_id, TaskStats(*self.prior))
            if self.decay < 1.0:  # discount old evidence towards the prior, once per update
                a0, b0 = self.prior
                s.alpha = a0 + (s.alpha - a0) * self.decay
                s.beta = b0 + (s.beta - b0) * self.decay
            for passed in results:
                s.alpha += 1.0 if passed else 0.0
                s.beta += 0.0 if passed else 1.0
                s.n += 1
                s.passes += int(passed)

    # ------------------------------------------------------------------ reporting

    def metrics(self) -> dict[str, float]:
        n = len(self.tasks) or 1
        parked = [t for t in self.tasks if self.parked(t.id)]
        solved = sum(1 for t in parked if self.stats[t.id].mean >= self.solved)
        m: dict[str, float] = {
            "curriculum/parked_frac": len(parked) / n,
            "curriculum/parked_solved": float(solved),
            "curriculum/parked_impossible": float(len(parked) - solved),
            "curriculum/frontier_frac": sum(1 for t in self.tasks if 0.2 <= self.stats[t.id].mean <= 0.8) / n,
            "curriculum/mean_pass_posterior": sum(self.stats[t.id].mean for t in self.tasks) / n,
            "curriculum/retests": float(self.counters["retests"]),
            "curriculum/replaced_groups": float(self.counters["replaced_groups"]),
        }
        for key, c in sorted(self.sampled.items()):
            m[f"curriculum/sampled/{key}"] = float(c)
        tiers: dict[int, list[float]] = defaultdict(list)
        for t in self.tasks:
            tiers[stratum(t)[1]].append(self.stats[t.id].mean)
        for tier, ms in sorted(tiers.items()):
            m[f"curriculum/posterior_mean/tier{tier}"] = sum(ms) / len(ms)
        return m

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "stats": {k: asdict(v) for k, v in self.stats.items()},
            "rng": _rng_to_json(self.rng.getstate()),
            "counters": dict(self.counters),
            "sampled": dict(self.sampled),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats = {k: TaskStats(**v) for k, v in state["stats"].items()}
        for t in self.tasks:
            self.stats.setdefault(t.id, TaskStats(*self.prior))
        self.rng.setstate(_rng_from_json(state["rng"]))
        self.counters = Counter(state.get("counters", {}))
        self.sampled = Counter(state.get("sampled", {}))


def _rng_to_json(state: tuple[Any, ...]) -> list[Any]:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_json(data: list[Any]) -> tuple[Any, ...]:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)
