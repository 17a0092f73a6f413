"""Sampling one iteration's training batch: curriculum-chosen tasks, rolled out in groups, groups
without a learning signal replaced by fresh tasks (DAPO's dynamic sampling).

Contract: the sampling seed of each (iteration, round) is fixed (:func:`sampling_seed`), so a
resumed run samples what the uninterrupted one did; the curriculum is updated with every root
sample's outcome.
"""

from __future__ import annotations

from typing import Any

from sparring.curriculum.sampler import BetaCurriculum
from sparring.monitor.progress import Progress
from sparring.rollout.scheduler import RolloutScheduler
from sparring.train.advantages import no_signal
from sparring.train.config import RLConfig
from sparring.train.evaluation import evaluate
from sparring.trajectory import Trajectory


def sampling_seed(cfg: RLConfig, iteration: int, round_: int = 0) -> int:
    """The sampling seed of an iteration's (re)sampling round: fixed, so a resumed run samples the same."""
    return cfg.seed * 1_000_003 + iteration * 101 + round_


def zero_variance_groups(trajs: list[Trajectory]) -> list[str]:
    """Task ids whose group has no learning signal: fewer than two trainable samples, or all rewards equal."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajs:
        groups.setdefault(t.group_id or t.id, []).append(t)
    out = []
    for members in groups.values():
        rewards = [t.reward for t in members if t.trainable and t.reward is not None]
        if no_signal(rewards):  # the one zero-variance rule (fewer than two rewards included)
            out.append(members[0].task_id)
    return out


async def sample_batch(
    cfg: RLConfig, curriculum: BetaCurriculum, sched: RolloutScheduler, policy: Any, run_id: str, it: int,
    progress: Progress | None = None,
) -> tuple[list[Trajectory], float, int]:  # fmt: skip
    """Roll out a batch; groups without reward variance are replaced by fresh tasks (DAPO's dynamic
    sampling) for up to ``resample_rounds`` rounds instead of failing the batch. Returns every
    trajectory (all are stored and counted), the seconds spent and how many groups were replaced."""
    batch = curriculum.sample(cfg.tasks_per_iteration)
    trajs: list[Trajectory] = []
    seconds = 0.0
    replaced = 0
    seen = {t.id for t in batch}
    for round_ in range(cfg.resample_rounds + 1):
        if not batch:
            break
        label = f"iteration {it} rollouts" + (f" (resampling round {round_})" if round_ else "")
        summary = await evaluate(
            sched, batch, policy, run_id, sampling_seed(cfg, it, round_), cfg.group_size, progress, label
        )
        seconds += summary.seconds
        trajs += summary.trajectories
        roots = [t for t in summary.trajectories if t.parent_id is None]  # forked branches are extra samples
        curriculum.update((t.task_id, t.passed) for t in roots if t.trainable)
        dead = zero_variance_groups(roots)
        if round_ == cfg.resample_rounds or not dead:
            break
        batch = curriculum.replacements(len(dead), exclude=seen)
        seen |= {t.id for t in batch}
        replaced += len(batch)
    return trajs, seconds, replaced
