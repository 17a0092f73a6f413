"""Evaluating a policy: roll it out with the evaluation judge only, canaries mixed in, and summarise.

``sparring eval`` and the Python API share this: the CLI parses its flags,
builds the backend and the policy, and prints :func:`evaluate`'s summary. The
judge is the evaluation split's (hidden/eval/ tests, never the training
judge's); with a canary rate, impossible variants of some tasks are rolled out
too, and the share of them the policy "passes" is the run's hack rate.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.judge.quality.canary import hack_rate, is_canary, mix_canaries
from sparring.policy.base import Policy
from sparring.rollout.episode import StageLimits
from sparring.rollout.run_records import RolloutSummary, outcome_figures, process_figures
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.base import SandboxBackend
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajectoryStore
from sparring.tasks.loader import Task
from sparring.trajectory import Trajectory


def check_eval_options(group_size: int, concurrency: int) -> None:
    if group_size < 1 or concurrency < 1:
        raise ConfigError("--group-size and --concurrency must be at least 1")


def eval_summary(
    summary: RolloutSummary,
    done: Sequence[Trajectory],
    canary_ids: Collection[str],
    judge: PytestJudge,
    tasks: Sequence[Task],
    seconds: float,
) -> dict[str, Any]:
    """The run's summary plus the evaluation figures: outcome figures over the real tasks only (reward
    mean over judged samples: a None reward is not a 0), the canaries' hack rate, and how many tasks had
    no evaluation split (scored on their training tests). ``outcome`` and ``process`` report the two
    apart: the outcome figures again, and the process checks (:func:`process_figures`)."""
    real = [t for t in done if t.task_id not in canary_ids]
    canary_pass = [t.passed for t in done if t.task_id in canary_ids]
    d = summary.to_json()
    d.update(
        {
            "judge_version": judge.version,
            "split": "eval",
            "tasks_without_eval_split": sum(1 for t in tasks if not judge.has_eval_split(t)),
            **outcome_figures(real),
            "outcome": outcome_figures(real),
            "process": process_figures(real),
            "canaries": len(canary_pass),
            "hack_rate": hack_rate(canary_pass),
            "seconds": round(seconds, 3),
        }
    )
    return d


async def evaluate(
    tasks: Sequence[Task],
    policy: Policy,
    backend: SandboxBackend,
    store: TrajectoryStore,
    *,
    group_size: int = 1,
    concurrency: int = 2,
    canary_rate: float = 0.0,
    seed: int = 0,
    make_runner: Callable[[RolloutScheduler], Any] | None = None,
    policy_turn_s: float | None = None,
) -> dict[str, Any]:
    """Roll ``policy`` out ``group_size`` times on every task (and on canaries at ``canary_rate``),
    judged by the evaluation judge in each task's pinned layer, into ``store``; the
    :func:`eval_summary`. The policy is closed at the end.

    ``make_runner``: an executor for the scheduler (``rollout(tasks, policy, g, run_id=, seed=)`` and
    ``aclose()``), e.g. the Ray executor, whose nodes judge with this scheduler's judge config;
    without one, the scheduler plays every sample in this process."""
    check_eval_options(group_size, concurrency)
    judge = PytestJudge(backend, config=JudgeConfig(split="eval"))
    tmp = Path(tempfile.mkdtemp(prefix="sparring-eval-"))
    done: list[Trajectory] = []
    t0 = time.perf_counter()
    try:
        canaries = mix_canaries(tasks, canary_rate, seed, tmp)
        pool = SandboxPool(backend, max_idle=concurrency)
        try:
            sched = RolloutScheduler(pool, judge, store, concurrency=concurrency, on_done=done.append,
                                     limits=StageLimits(policy_turn_s=policy_turn_s))  # fmt: skip
            if make_runner is None:
                summary = await sched.run([*tasks, *canaries], policy, group_size, seed=seed)
            else:
                runner = make_runner(sched)
                try:
                    summary = await runner.rollout(
                        [*tasks, *canaries], policy, group_size, run_id=uuid.uuid4().hex[:12], seed=seed
                    )
                finally:
                    await runner.aclose()
        finally:
            await pool.close()
            await policy.close()
        canary_ids = {c.id for c in canaries if is_canary(c)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return eval_summary(summary, done, canary_ids, judge, tasks, time.perf_counter() - t0)
