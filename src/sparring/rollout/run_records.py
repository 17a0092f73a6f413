"""The records of a rollout run: its configuration, live counters and final summary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sparring.errors import ConfigError
from sparring.rollout.branching import BranchPlan
from sparring.rollout.episode import StageLimits
from sparring.trajectory import Trajectory


@dataclass(frozen=True)
class SchedulerConfig:
    """How a rollout run uses its resources and treats faults."""

    concurrency: int = 4
    """Rollouts (and so agent sandboxes) in flight at once."""
    model_concurrency: int | None = None
    """Policy requests in flight at once (None: as many as rollouts)."""
    judge_concurrency: int | None = None
    """Judge runs at once (None: as many as rollouts, at most 2 per CPU: a local judge runs the
    tests on this machine's CPUs, and hundreds at once only thrash them)."""
    max_retries: int = 2
    """Fresh-sandbox retries of an infrastructure fault, per sample and round."""
    backoff_s: float = 0.05
    """First retry delay; doubles per retry, capped by ``backoff_max_s``."""
    backoff_max_s: float = 5.0
    replay_rounds: int = 1
    """Rounds of replay, after the run, of samples that ended in ``infra_error``."""
    spares: int = 0
    """Extra members started per group; the group is done at ``group_size`` trainable results."""
    snapshot_every: int = 0
    """Snapshot the sandbox every k steps so a retry continues from there (0: retries restart)."""
    judge_retries: int = 1
    max_steps: int | None = None
    """Override the tasks' step budget."""
    limits: StageLimits = field(default_factory=StageLimits)
    drain_s: float = 30.0
    """After a stop request, how long in-flight rollouts may take to finish before they are cancelled."""
    branch: BranchPlan | None = None
    """Forked rollouts: where each root forks and into how many branches (None: no forks)."""

    def __post_init__(self) -> None:
        for name in ("concurrency", "model_concurrency", "judge_concurrency"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"{name} must be at least 1 (got {v})")
        if self.max_retries < 0 or self.replay_rounds < 0 or self.spares < 0 or self.snapshot_every < 0:
            raise ConfigError("max_retries, replay_rounds, spares and snapshot_every must be >= 0")


@dataclass
class SchedulerStats:
    """Live counters (what the progress display shows)."""

    requested: int = 0
    in_flight: int = 0
    judging: int = 0
    done: int = 0
    failed: int = 0
    retried: int = 0
    replayed: int = 0
    resumed: int = 0
    cancelled: int = 0
    started_at: float = field(default_factory=time.monotonic)
    sandbox_ms: float = 0.0
    """Time spent acquiring and releasing agent sandboxes (all samples)."""
    store_ms: float = 0.0
    """Time spent writing finished samples to the store (all samples)."""

    @property
    def per_minute(self) -> float:
        dt = time.monotonic() - self.started_at
        return 60.0 * (self.done - self.resumed) / dt if dt > 0 else 0.0


@dataclass
class RolloutSummary:
    requested: int = 0
    stored: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    reward_mean: float = 0.0
    pass_rate: float = 0.0
    seconds: float = 0.0
    run_id: str = ""
    resumed: int = 0
    replayed: int = 0
    cancelled_spares: int = 0
    interrupted: bool = False
    pending: int = 0
    trajectories: list[Trajectory] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)
    """Samples each node brought back (distributed runs only)."""
    branches: dict[str, int] | None = None
    """Forked runs only: branch trajectories stored, by status (roots are the figures above)."""

    def to_json(self) -> dict[str, object]:
        extra: dict[str, object] = {"nodes": dict(self.nodes)} if self.nodes else {}
        if self.branches is not None:
            extra["branches"] = dict(self.branches)
        return {
            "requested": self.requested,
            "stored": self.stored,
            "statuses": self.statuses,
            "retried": self.retried,
            "reward_mean": round(self.reward_mean, 6),
            "pass_rate": round(self.pass_rate, 6),
            "seconds": round(self.seconds, 3),
            "run_id": self.run_id,
            "resumed": self.resumed,
            "replayed": self.replayed,
            "cancelled_spares": self.cancelled_spares,
            "interrupted": self.interrupted,
            "pending": self.pending,
            **extra,
        }


def outcome_figures(trajectories: list[Trajectory]) -> dict[str, float | int]:
    """Pass rate over every trajectory, reward mean over the judged ones only.

    A trajectory whose reward is None (infra, policy or judge error) was never
    scored: it counts against the pass rate (it did not pass) but is left out of
    the reward mean instead of being summed as a number (or as 0). ``judged`` and
    ``unjudged`` say how many there were of each.
    """
    judged = [t.reward for t in trajectories if t.reward is not None]
    n = len(trajectories)
    return {
        "pass_rate": sum(t.passed for t in trajectories) / n if n else 0.0,
        "reward_mean": round(sum(judged) / len(judged), 6) if judged else 0.0,
        "judged": len(judged),
        "unjudged": n - len(judged),
    }


def process_figures(trajectories: list[Trajectory]) -> dict[str, Any]:
    """The process checks over the judged trajectories, apart from the outcome: the share with any
    process flag, and per check the share it tripped on and its mean value."""
    judged = [t for t in trajectories if t.process_components]
    checks = sorted({k for t in judged for k in t.process_components})
    n = len(judged)
    return {
        "judged": n,
        "flag_rate": round(sum(1 for t in judged if t.process_flags) / n, 6) if n else 0.0,
        "checks": {
            k.removeprefix("process/"): {
                "tripped": round(sum(1 for t in judged if k in t.flags) / n, 6),
                "mean": round(sum(t.process_components.get(k, 1.0) for t in judged) / n, 6),
            }
            for k in checks
        },
    }


RESUME_KEYS = ("policy", "group_size", "seed")
"""What a resumed run must share with its start: the samples stored so far were drawn with these."""


def check_resume(run_id: str, previous: dict[str, Any] | None, config: dict[str, Any]) -> None:
    """ConfigError if ``config`` cannot continue run ``run_id`` as started (``previous``: the stored
    run record with its ``config``, None for a new run): its stored samples would mix two experiments."""
    if not previous:
        return
    before = previous.get("config", {})
    if {k: before.get(k) for k in RESUME_KEYS} != {k: config.get(k) for k in RESUME_KEYS}:
        raise ConfigError(
            f"run {run_id} was started with policy {before.get('policy')!r}, group size "
            f"{before.get('group_size')}, seed {before.get('seed')}: resume it with those"
        )
