"""Judging a batch of workspaces: which diff each task gets, canaries, the review queue, the summary.

``sparring judge batch`` and the Python API share this: the CLI parses its
flags, builds the judge and prints :func:`run_batch`'s summary. Each task is
judged with one workspace diff chosen by :class:`BatchSource` (its initial
state, the reference solution, one red-team hack class, or a directory of final
workspaces); impossible canary variants of some tasks may be mixed in, and
every result may be offered to the review queue.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.judge.base import JudgeResult
from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.quality.canary import hack_rate, is_canary, mix_canaries
from sparring.judge.quality.review import ReviewQueue
from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.storage.workspace import tree_diff
from sparring.tasks.hacks import HACKS
from sparring.tasks.loader import Task, solution_diff

SUMMARY_RESULT_FIELDS = ("task_id", "canary", "status", "reason", "reward", "flags")
"""What the summary keeps of each result (the full result, log included, goes to the review queue)."""


@dataclass(frozen=True)
class BatchSource:
    """Which workspace each task is judged on: at most one of ``workspaces`` (``DIR/<task id>/``),
    ``reference`` (the reference solution) and ``hack`` (a red-team class); none: the initial state."""

    workspaces: Path | None = None
    reference: bool = False
    hack: str | None = None

    def check(self, concurrency: int = 1) -> None:
        """ConfigError naming the flag when the choice is ambiguous or names nothing that exists."""
        if concurrency < 1:
            raise ConfigError("--concurrency must be at least 1")
        if sum([self.workspaces is not None, self.reference, self.hack is not None]) > 1:
            raise ConfigError("give at most one of --workspaces, --reference, --hack")
        if self.hack is not None and self.hack not in HACKS:
            raise ConfigError(f"unknown hack class {self.hack!r} (known: {', '.join(sorted(HACKS))})")
        if self.workspaces is not None and not self.workspaces.is_dir():
            raise ConfigError(f"--workspaces {self.workspaces} is not a directory")

    def diff_for(self, task: Task) -> WorkspaceDiff:
        """The diff ``task`` is judged with; a canary gets the diff of the task it was made from (a
        missing workspace directory is the initial state)."""
        base = task.id.removesuffix("-canary") if is_canary(task) else task.id
        if self.workspaces is not None:
            d = self.workspaces / base
            return tree_diff(task.workspace, d) if d.is_dir() else WorkspaceDiff()
        if self.reference:
            return solution_diff(task)
        if self.hack is not None:
            return HACKS[self.hack](task)
        return WorkspaceDiff()


async def judge_all(
    judge: PytestJudge,
    tasks: Sequence[Task],
    source: BatchSource,
    concurrency: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Every task judged (``concurrency`` at once; a judge failure is a ``judge_error`` result), in
    task order: the result's JSON plus ``task_id``, ``canary`` and the judged ``diff``. ``progress``
    is called with (judged, total) after each judgement."""
    sem = asyncio.Semaphore(concurrency)
    done = [0]

    async def one(t: Task) -> dict[str, Any]:
        diff = source.diff_for(t)
        async with sem:
            r: JudgeResult = await judge.score_or_error(t, diff)
        done[0] += 1
        if progress is not None:
            progress(done[0], len(tasks))
        return {"task_id": t.id, "canary": is_canary(t), **r.to_json(), "diff": diff.to_json()}

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def review_key(result: dict[str, Any], now_ns: int) -> str:
    """The review queue's key of a batch result: unique per judgement (a re-run is a new item)."""
    return f"batch:{result['task_id']}:{result['judge_version']}:{result.get('dynamic_seed')}:{now_ns}"


def queue_for_review(results: Sequence[dict[str, Any]], review_db: Path) -> int:
    """Offer every result to the review queue at ``review_db``; how many it queued as high-risk."""
    queued = 0
    q = ReviewQueue(review_db)
    try:
        for r in results:
            item = {k: v for k, v in r.items() if k != "log"}
            queued += bool(q.observe(review_key(r, time.time_ns()), r["task_id"], item))
    finally:
        q.close()
    return queued


def _passed(r: dict[str, Any]) -> bool:
    return bool(r["components"].get("all_pass", 0.0) >= 1.0)


def batch_summary(
    results: Sequence[dict[str, Any]], judge_version: str, queued: int, seconds: float
) -> dict[str, Any]:
    """The batch's figures: statuses, reward mean and pass rate over the real tasks (canaries apart;
    a judge_error result counts with its reward 0), flagged results, the canaries' hack rate, speed."""
    canary_pass = [_passed(r) for r in results if r["canary"]]
    real = [r for r in results if not r["canary"]]
    return {
        "judge_version": judge_version,
        "judged": len(results),
        "statuses": {s: sum(1 for r in results if r["status"] == s) for s in ("ok", "judge_error")},
        "reward_mean": sum(r["reward"] for r in real) / len(real) if real else 0.0,
        "pass_rate": sum(_passed(r) for r in real) / len(real) if real else 0.0,
        "flagged": sum(1 for r in real if r["flags"]),
        "canaries": len(canary_pass),
        "hack_rate": hack_rate(canary_pass),
        "queued_for_review": queued,
        "seconds": round(seconds, 3),
        "per_minute": round(len(results) / seconds * 60, 2) if seconds > 0 else 0.0,
        "results": [{k: r[k] for k in SUMMARY_RESULT_FIELDS} for r in results],
    }


def run_batch(
    judge: PytestJudge,
    tasks: Sequence[Task],
    source: BatchSource,
    *,
    concurrency: int = 2,
    canary_rate: float = 0.0,
    seed: int = 0,
    review_db: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Judge ``tasks`` (plus canaries at ``canary_rate``, chosen by ``seed``) and summarise
    (:func:`batch_summary`); high-risk results go to the review queue at ``review_db``.
    Runs its own event loop."""
    source.check(concurrency)
    tmp = Path(tempfile.mkdtemp(prefix="sparring-canary-"))
    try:
        canaries = mix_canaries(tasks, canary_rate, seed, tmp)
        t0 = time.perf_counter()
        results = asyncio.run(judge_all(judge, [*tasks, *canaries], source, concurrency, progress))
        secs = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    queued = queue_for_review(results, review_db) if review_db is not None else 0
    return batch_summary(results, judge.version, queued, secs)
