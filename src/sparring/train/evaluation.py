"""Rolling tasks out to measure a policy, and the metrics rows the measurements become.

Contract: :func:`evaluate` rolls every task out ``samples`` times with a fixed seed and follows
it on the ``rollouts`` progress bar (marked incomplete if interrupted); :func:`heldout_metrics`
names a held-out phase's numbers (``eval/heldout/{phase}/...`` and the phase-free curve);
:func:`skill_of` is the look-before-acting measure of the families that teach it.
"""

from __future__ import annotations

from typing import Any

from sparring.monitor.progress import NoProgress, Progress
from sparring.rollout.scheduler import RolloutScheduler, RolloutSummary
from sparring.tasks.loader import Task
from sparring.train.config import RLConfig
from sparring.trajectory import Trajectory


async def evaluate(
    sched: RolloutScheduler, tasks: list[Task], policy: Any, run_id: str, seed: int, samples: int = 1,
    progress: Progress | None = None, label: str = "held-out evaluation",
) -> RolloutSummary:  # fmt: skip
    """Roll out every task ``samples`` times (the scheduler's on_done advances the ``rollouts`` bar)."""
    prog = progress or NoProgress()
    prog.start("rollouts", len(tasks) * samples, label)
    try:
        summary = await sched.run(tasks, policy, samples, run_id=run_id, seed=seed)
    except BaseException:  # interrupted or failed: the bar says where it stopped, never "16/16 done"
        prog.finish("rollouts", complete=False)
        raise
    prog.finish("rollouts", complete=not summary.interrupted)
    return summary


def heldout_metrics(phase: str, summary: RolloutSummary) -> dict[str, Any]:
    """A held-out evaluation as a metrics row: per phase (``before_rl``/``after_rl``) and as one curve."""
    return {
        f"eval/heldout/{phase}/pass_rate": summary.pass_rate,
        f"eval/heldout/{phase}/reward_mean": summary.reward_mean,
        "eval/heldout/pass_rate": summary.pass_rate,
        "eval/heldout/reward_mean": summary.reward_mean,
        "eval/heldout/n": summary.requested,
    }


def curve_point(iterations: list[dict[str, Any]], pass_rate: float, reward_mean: float) -> dict[str, Any]:
    """A point of a run's held-out curve (``eval_every``): the iterations run so far and the tool calls
    their batches sampled (a forked branch's calls past its branch turn only), with the pass rate
    and mean reward of the held-out evaluation made then."""
    return {
        "iteration": len(iterations),
        "sampled_tool_calls": sum(int(r.get("sampled_tool_calls", 0)) for r in iterations),
        "pass_rate": pass_rate,
        "reward_mean": reward_mean,
    }


def calls_to_reach(curve: list[dict[str, Any]], target: float) -> int | None:
    """The sampled tool calls at the first point of a held-out ``curve`` (:func:`curve_point`) whose
    pass rate reaches ``target`` (None: none does); how issue 37 compares credit assignments."""
    for p in sorted(curve, key=lambda p: (p["sampled_tool_calls"], p["iteration"])):
        if p["pass_rate"] >= target - 1e-9:
            return int(p["sampled_tool_calls"])
    return None


def mean_pass_rate(curve: list[dict[str, Any]], budget: int) -> float | None:
    """The held-out pass rate of a ``curve`` averaged over its first ``budget`` sampled tool calls: each
    point's pass rate holds until the next point's calls (a step function from the first point), and
    the area under it up to ``budget`` is divided by the calls it spans (``budget``, where the curve
    starts before any update). A single evaluation swings with its sampling; the average over a common
    budget compares two runs' whole curves. None: the curve is empty or ``budget`` is not positive; a
    curve that stops before ``budget`` holds its last point."""
    pts = sorted(curve, key=lambda p: (p["sampled_tool_calls"], p["iteration"]))
    if not pts or budget <= 0:
        return None
    area = 0.0
    for p, nxt in zip(pts, [*pts[1:], None], strict=True):
        lo = min(int(p["sampled_tool_calls"]), budget)
        hi = budget if nxt is None else min(int(nxt["sampled_tool_calls"]), budget)
        area += float(p["pass_rate"]) * (hi - lo)
    first = min(int(pts[0]["sampled_tool_calls"]), budget)
    return area / (budget - first) if budget > first else float(pts[0]["pass_rate"])


def skill_of(cfg: RLConfig, trajs: list[Trajectory]) -> dict[str, float | None] | None:
    """The look-before-acting measure of ``trajs`` if the run's family teaches it, else None."""
    from sparring.monitor.skill import look_skill
    from sparring.tasks.families import (
        INSPECTIONS,  # lazily, like generate_family_tasks: generators import much
    )

    inspection = INSPECTIONS.get(cfg.family) if cfg.family is not None else None
    return look_skill(trajs, inspection) if inspection is not None else None
