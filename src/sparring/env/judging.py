"""The judge call of an episode: score a final workspace diff, retrying a judge that fails.

The process checks (:mod:`sparring.judge.process`) are applied here too, over the
episode's messages and tool calls, so every way of judging an episode (the
Environment's own, a rollout's, a re-judge) records them the same way.

A judge that raises or overruns its limit is the judge's fault, never the
agent's: it is retried, and if it keeps failing the outcome is an error string
(status ``judge_error``, reward None), never a zero.
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


async def judge_diff(
    judge: Judge, task: Task, diff: WorkspaceDiff, usage: Usage | None, *, judge_s: float,
    retries: int = 1, sem: asyncio.Semaphore | None = None, process: ProcessInput | None = None,
) -> Judgement:  # fmt: skip
    """Score ``diff`` with up to ``retries`` further tries (bounded by ``sem`` when given); with
    ``process`` (the episode's conversation) the process checks are added to the result."""
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
            if process is not None:
                res = apply_process(res, process, task.spec.judge.weights)
            return Judgement(res)
        if attempt < retries:
            await asyncio.sleep(0.05 * 2**attempt)
    return Judgement(None, last)


def process_input(
    task: Task, messages: Sequence[Mapping[str, Any]], steps: Sequence[ToolStep]
) -> ProcessInput:
    """What the process checks read of an episode of ``task``."""
    return ProcessInput(messages=list(messages), steps=list(steps), tools=frozenset(task.spec.tools),
                        initial_files=workspace_files(task.workspace))  # fmt: skip
