"""Measured difficulty: a task's pass rate over stored rollouts, and the tier it implies.

Every task carries a *generator tier* (``task.toml`` ``difficulty``, from the
generator's parameters). Once policies have played a task, the trajectory store
knows how often they solved it; :func:`measure` counts that per task version (from
the trajectories the caller reads out of the store) and
:func:`store_difficulty` records it, with a derived tier, in ``difficulty.json``
next to ``task.toml``.

The measurement lives beside the task, outside the digested bytes, on purpose:
a pass rate is a fact about policies *playing* the task, not about the task. It
changes with every run and every better policy, while the task (workspace,
tests, reference, environment) stays the same bytes. Writing it into task.toml
would change the digest, which would force a new version after every run, void
the stored admission result and split one task's history across versions.
``difficulty.json`` names the digest it was measured on and is ignored once the
task's bytes change (as ``admission.json`` is).

Only rollouts whose reward is a fact about the policy count (statuses ``ok``,
``truncated``, ``timeout`` with a reward; infrastructure and judge errors do
not), and only those of the same task digest: a rollout of an older version
says nothing about this one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring.errors import TaskError
from sparring.tasks.loader import Task, read_task_record, write_task_record
from sparring.trajectory import Trajectory

DIFFICULTY_FILE = "difficulty.json"
TIERS = 5
"""Measured tiers 1 (solved almost always) .. 5 (almost never): pass rate in fifths, hardest last."""
MIN_ROLLOUTS = 4


def tier_of(pass_rate: float) -> int:
    """1 for a pass rate above 0.8, 2 above 0.6, ... 5 at or below 0.2."""
    if not 0.0 <= pass_rate <= 1.0:
        raise ValueError(f"pass rate must be in [0, 1], got {pass_rate}")
    return min(TIERS, TIERS + 1 - math.ceil(round(pass_rate * TIERS, 9)))


def wilson(passes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a pass rate (honest about small samples)."""
    if n == 0:
        return (0.0, 1.0)
    p = passes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (round(max(0.0, mid - half), 4), round(min(1.0, mid + half), 4))


@dataclass
class Measurement:
    task_id: str
    version: int
    digest: str
    generator_tier: int
    rollouts: int = 0
    passes: int = 0
    policies: set[str] = field(default_factory=set)
    judge_versions: set[str] = field(default_factory=set)

    @property
    def pass_rate(self) -> float | None:
        return self.passes / self.rollouts if self.rollouts else None

    def to_json(self, min_rollouts: int = MIN_ROLLOUTS) -> dict[str, Any]:
        rate = self.pass_rate
        enough = rate is not None and self.rollouts >= min_rollouts
        return {
            "id": self.task_id,
            "version": self.version,
            "digest": self.digest,
            "generator_tier": self.generator_tier,
            "rollouts": self.rollouts,
            "passes": self.passes,
            "pass_rate": None if rate is None else round(rate, 4),
            "wilson95": list(wilson(self.passes, self.rollouts)),
            "measured_tier": tier_of(rate) if enough and rate is not None else None,
            "min_rollouts": min_rollouts,
            "policies": sorted(self.policies),
            "judge_versions": sorted(self.judge_versions),
        }


def measure(
    tasks: Iterable[Task], trajectories_of: Callable[[str], Iterable[Trajectory]]
) -> list[Measurement]:
    """Pass rates of ``tasks`` (per digest) over the judged rollouts ``trajectories_of(task_id)`` yields.

    The caller reads the store (``store.iter_search`` with the task id and any policy filter): the
    curriculum counts, it does not open stores (the layering: tests/test_layering.py)."""
    tasks = list(tasks)
    out = {t.digest: Measurement(t.id, t.spec.version, t.digest, t.spec.difficulty) for t in tasks}
    for task_id in sorted({t.id for t in tasks}):
        for tr in trajectories_of(task_id):
            m = out.get(tr.task_digest)
            if m is None or not tr.trainable:
                continue
            m.rollouts += 1
            m.passes += int(tr.passed)
            m.policies.add(tr.policy)
            m.judge_versions.add(tr.judge_version)
    return list(out.values())


def difficulty_record(m: Measurement, store_path: Path, min_rollouts: int = MIN_ROLLOUTS) -> dict[str, Any]:
    return {
        **m.to_json(min_rollouts),
        "source": str(Path(store_path).resolve()),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def store_difficulty(task: Task, record: dict[str, Any]) -> Path:
    """Write difficulty.json next to task.toml atomically (outside the digest, like admission.json)."""
    if record.get("digest") != task.digest:
        raise TaskError(f"difficulty record is for {record.get('digest')}, not {task.id}'s {task.digest}")
    return write_task_record(task, DIFFICULTY_FILE, record)


def load_difficulty(task: Task) -> dict[str, Any] | None:
    """The stored measurement, if it was made on these exact bytes (same digest)."""
    return read_task_record(task, DIFFICULTY_FILE)
