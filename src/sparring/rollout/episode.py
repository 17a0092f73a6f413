"""One multi-turn rollout: the policy calls tools in a sandbox until it submits,
runs out of steps or time; then the judge scores the final workspace diff.

Statuses (DESIGN.md §4): ``ok`` (submitted), ``truncated`` (step budget),
``timeout`` (wall budget), ``policy_error``, ``judge_error``. Sandbox faults
raise :class:`SandboxError` so the scheduler can retry on a fresh sandbox:
they are ``infra_error`` only once retries are spent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sparring.env.tools import ToolExecutor, tool_schemas, truncate_observation
from sparring.errors import JudgeError, PolicyError
from sparring.judge.base import Judge
from sparring.policy.base import ActRequest, Policy
from sparring.rollout.trajectory import Status, ToolStep, Trajectory
from sparring.sandbox.base import Sandbox
from sparring.tasks.loader import Task

SYSTEM_PROMPT = (
    "You are a careful software engineer. You work in /workspace through the tools you are given. "
    "Call one tool at a time. When the task is done, call submit()."
)
NO_TOOL_CALL = "No tool call was found in your reply. Call one of the tools, or submit() when you are done."


def initial_messages(task: Task) -> list[dict[str, Any]]:
    s = task.spec
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{s.instruction}\n\nSuccess criteria: {s.success_criteria}"},
    ]


def _safe_args(raw: Any) -> dict[str, Any] | None:
    try:
        return ToolExecutor._parse(raw)
    except Exception:
        return None


async def run_episode(
    task: Task,
    policy: Policy,
    sandbox: Sandbox,
    judge: Judge,
    *,
    sample_index: int = 0,
    seed: int = 0,
    group_id: str = "",
    run_id: str = "",
    max_steps: int | None = None,
    wall_s: float | None = None,
) -> Trajectory:
    lim = task.spec.limits
    max_steps = max_steps or lim.max_steps
    wall = wall_s or lim.wall_s
    t0 = time.perf_counter()
    deadline = time.monotonic() + wall
    tools = tool_schemas(task.spec.tools)
    executor = ToolExecutor(sandbox, task.spec.tools, exec_timeout=lim.exec_timeout_s)
    messages = initial_messages(task)
    steps: list[ToolStep] = []
    traces: list[dict[str, Any]] = []
    status: Status = "truncated"
    error: str | None = None
    submitted = False
    policy_version = policy.version
    policy_ms = tool_ms = 0.0

    for step in range(max_steps):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            status = "timeout"
            break
        req = ActRequest(messages=list(messages), tools=tools, task=task, sample_index=sample_index, seed=seed, step=step)
        tp = time.perf_counter()
        try:
            action = await asyncio.wait_for(policy.act(req), remaining)
        except TimeoutError:
            status = "timeout"
            break
        except PolicyError as e:
            status, error = "policy_error", str(e)
            break
        policy_ms += (time.perf_counter() - tp) * 1000
        msg = dict(action.message)
        msg.setdefault("role", "assistant")
        parse_errors = msg.pop("parse_errors", None) or []
        messages.append(msg)
        if action.trace is not None:
            traces.append({"turn": len(traces), "message_index": len(messages) - 1, **action.trace.to_json()})
        calls = msg.get("tool_calls") or []
        if not calls:
            hint = ("Your tool call could not be parsed: " + "; ".join(map(str, parse_errors))[:500]) if parse_errors else NO_TOOL_CALL
            messages.append({"role": "user", "content": hint})
            continue
        for call in calls:
            fn = call.get("function") or {}
            name, raw = str(fn.get("name", "")), fn.get("arguments", "")
            tt = time.perf_counter()
            outcome = await executor.run(name, raw)
            dt = (time.perf_counter() - tt) * 1000
            tool_ms += dt
            full = outcome.output if outcome.error is None else f"error: {outcome.error}"
            obs, cut = truncate_observation(full)
            steps.append(
                ToolStep(
                    index=len(steps),
                    tool_call_id=str(call.get("id", "")),
                    name=name,
                    arguments=_safe_args(raw),
                    raw_arguments=raw if isinstance(raw, str) else "",
                    output=full,
                    observation_truncated=cut,
                    exit_code=outcome.exit_code,
                    error=outcome.error,
                    duration_ms=dt,
                )
            )
            messages.append({"role": "tool", "tool_call_id": str(call.get("id", "")), "content": obs})
            if outcome.submitted:
                submitted = True
                break
        if submitted:
            status = "ok"
            break
    rollout_ms = (time.perf_counter() - t0) * 1000

    diff = await sandbox.diff()
    traj = Trajectory(
        run_id=run_id,
        task_id=task.id,
        task_version=task.spec.version,
        task_digest=task.digest,
        family=task.spec.family,
        difficulty=task.spec.difficulty,
        group_id=group_id,
        sample_index=sample_index,
        policy=policy.name,
        policy_version=policy_version,
        judge_version=getattr(judge, "version", ""),
        status=status,
        messages=messages,
        steps=steps,
        traces=traces,
        diff=diff.to_json(),
        error=error,
        submitted=submitted,
    )
    tj = time.perf_counter()
    if status != "policy_error":
        try:
            res = await judge.score(task, diff)
            traj.reward, traj.components, traj.flags, traj.tests = res.reward, res.components, res.flags, res.tests
            traj.judge_version = res.judge_version
        except JudgeError as e:
            traj.status, traj.error = "judge_error", str(e)
    traj.timings = {
        "rollout_ms": rollout_ms,
        "policy_ms": policy_ms,
        "tool_ms": tool_ms,
        "judge_ms": (time.perf_counter() - tj) * 1000,
        "total_ms": (time.perf_counter() - t0) * 1000,
    }
    return traj
