"""The judge call of an episode: score a final workspace diff, retrying a judge that fails.

The process checks (:mod:`sparring.judge.process`) are applied here too, over the
episode's messages and tool calls, so every way of judging an episode (the
Environment's own, a rollout's, a re-judge) records them the same way.

A judge that raises, overruns its limit or returns a ``judge_error`` result is
the judge's fault, never the agent's: it is retried, and if it keeps failing
the outcome is ``Judgement(None, error)`` (status ``judge_error``, reward
None), never a zero. This is the one place where the judge's failure forms (a
raised :class:`~sparring.errors.JudgeError`, a ``JudgeResult`` with status
``judge_error``) become the episode's.

A diff the host flagged (a workspace it refused to carry whole: too large,
unrepresentable names) is never handed to the judge: the verdict is reward 0
with the diff's flags, whatever the judge (:func:`refused_result`). Every way
of judging an episode goes through :func:`judge_diff`, so they all agree.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparring.errors import JudgeError
from sparring.judge.base import Judge, JudgeResult, Usage, score_with_usage
from sparring.judge.process import ProcessInput, apply_process, workspace_files
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.loader import Task
from sparring.trajectory import ToolStep


@dataclass(frozen=True)
class Judgement:
    """The judge's result, or why there is none."""

    result: JudgeResult | None
    error: str | None = None


def refused_result(diff: WorkspaceDiff, judge_version: str) -> JudgeResult:
    """The verdict on a flagged diff: 0 with its flags, never a half-judged workspace."""
    return JudgeResult(reward=0.0, components={}, flags=sorted(set(diff.flags)), judge_version=judge_version,
                       log=diff.detail)  # fmt: skip


async def judge_diff(
    judge: Judge, task: Task, diff: WorkspaceDiff, usage: Usage | None, *, judge_s: float,
    retries: int = 1, sem: asyncio.Semaphore | None = None, process: ProcessInput | None = None,
) -> Judgement:  # fmt: skip
    """Score ``diff`` with up to ``retries`` further tries (bounded by ``sem`` when given); with
    ``process`` (the episode's conversation) the process checks are added to the result."""
    if diff.flags:
        return Judgement(refused_result(diff, str(getattr(judge, "version", ""))))
    last = ""
    for attempt in range(retries + 1):
        try:
            if sem is None:
                res = await asyncio.wait_for(score_with_usage(judge, task, diff, usage), judge_s)
            else:
                async with sem:
                    res = await asyncio.wait_for(score_with_usage(judge, task, diff, usage), judge_s)
        except TimeoutError:
            last = f"judge exceeded its {judge_s:g}s stage limit"
        except JudgeError as e:
            last = str(e)
        except Exception as e:  # a crashing judge is the judge's fault, never the policy's
            last = "judge crashed: " + "".join(traceback.format_exception_only(e)).strip()
        else:
            if res.status == "ok":
                if process is not None:
                    res = apply_process(res, process, task.spec.judge.weights)
                return Judgement(res)
            last = f"judge_error ({res.reason}): {res.log[-2000:]}"  # a failure returned, not raised
        if attempt < retries:
            await asyncio.sleep(0.05 * 2**attempt)
    return Judgement(None, last)


def process_input(
    task: Task, messages: Sequence[Mapping[str, Any]], steps: Sequence[ToolStep]
) -> ProcessInput:
    """What the process checks read of an episode of ``task``."""
    return ProcessInput(messages=list(messages), steps=list(steps), tools=frozenset(task.spec.tools),
                        initial_files=workspace_files(task.workspace))  # fmt: skip
