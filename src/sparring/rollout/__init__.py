"""Rollout: drives Environments with a Policy, G samples per task, and stores every attempt.

Public API: :class:`RolloutScheduler` (groups, bounded concurrency, retries,
resume) and its :class:`RolloutSummary`, :func:`run_episode` (one episode:
an Environment driven by a Policy) with its :class:`StageLimits`, and
:class:`ExperienceQueue` with :class:`BatchLag` (the one bound on how far rollouts may run ahead of the
weights). The trajectory record itself lives in :mod:`sparring.trajectory`.
"""

from sparring.rollout.buffer import BatchLag, ExperienceQueue
from sparring.rollout.episode import StageLimits, run_episode
from sparring.rollout.scheduler import RolloutScheduler, RolloutSummary

__all__ = ["BatchLag", "ExperienceQueue", "RolloutScheduler", "RolloutSummary", "StageLimits", "run_episode"]
