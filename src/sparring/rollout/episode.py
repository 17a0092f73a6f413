"""One multi-turn rollout: the policy calls tools in a sandbox until it submits,
runs out of steps or time; then the judge scores the final workspace diff.

Statuses (DESIGN.md §4): ``ok`` (submitted), ``truncated`` (step budget),
``timeout`` (wall budget), ``policy_error``, ``judge_error``. Sandbox faults
(and a tool call or sandbox start that outlives its stage limit) raise
:class:`SandboxError` so the scheduler can retry on a fresh sandbox: they are
``infra_error`` only once retries are spent. What the agent made and the host
refuses to carry (a workspace beyond its quota, names a diff cannot hold) is
the agent's doing, not the infrastructure's: the diff comes back flagged and
scores 0 with the flag, and a checkpoint that cannot be taken is skipped.

The loop's state lives in an :class:`Episode`, not on the stack, so a rollout
whose sandbox dies can continue: every ``snapshot_every`` steps the sandbox is
snapshotted and the episode remembers how far the conversation had got; the
scheduler restores the snapshot into a fresh sandbox, :meth:`Episode.rewind`
drops the turns after it, and :meth:`Episode.play` carries on.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from sparring.env.tools import ToolExecutor, tool_schemas, truncate_observation
from sparring.errors import JudgeError, PolicyError, SandboxError, WorkspaceFault
from sparring.judge.base import Judge, Usage, score_with_usage
from sparring.policy.base import ActRequest, Policy
from sparring.rollout.trajectory import Status, ToolStep, Trajectory
from sparring.sandbox.base import Sandbox, WorkspaceDiff
from sparring.tasks.loader import Task

SYSTEM_PROMPT = (
    "You are a careful software engineer. You work in /workspace through the tools you are given. "
    "Call one tool at a time. When the task is done, call submit()."
)
NO_TOOL_CALL = "No tool call was found in your reply. Call one of the tools, or submit() when you are done."


@dataclass(frozen=True)
class StageLimits:
    """Per-stage time limits in seconds (None: the stage's own default).

    A stage that overruns is typed by who owns it: sandbox start and tool calls
    are infrastructure (retried), a policy turn is ``policy_error``, the whole
    rollout is ``timeout`` (the task's wall budget), the judge is ``judge_error``.
    """

    sandbox_start_s: float = 120.0
    """Acquiring (creating or restoring) a sandbox."""
    tool_call_s: float | None = None
    """One tool call, beyond which the sandbox counts as hung (default: 4x the task's exec timeout + 10 s)."""
    policy_turn_s: float | None = None
    """One policy turn (default: whatever is left of the rollout's wall budget)."""
    rollout_s: float | None = None
    """The whole agent loop (default: the task's ``limits.wall_s``)."""
    judge_s: float = 600.0
    """Scoring one final workspace."""


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


@dataclass
class _Mark:
    """Where a snapshot was taken: its id and the episode's lengths and clocks at that moment."""

    snapshot_id: str
    step: int
    messages: int
    steps: int
    traces: int
    play_ms: float = 0.0
    policy_ms: float = 0.0
    tool_ms: float = 0.0


@dataclass
class Episode:
    """The mutable state of one rollout (survives a change of sandbox)."""

    task: Task
    policy: Policy
    sample_index: int = 0
    seed: int = 0
    max_steps: int = 0
    wall_s: float = 0.0
    limits: StageLimits = field(default_factory=StageLimits)
    snapshot_every: int = 0
    model_sem: asyncio.Semaphore | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    steps: list[ToolStep] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)
    step: int = 0
    status: Status = "truncated"
    error: str | None = None
    submitted: bool = False
    policy_ms: float = 0.0
    tool_ms: float = 0.0
    play_ms: float = 0.0
    mark: _Mark | None = None
    policy_version: int = 0
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_limit: float = 0.0
    _play_start: float = 0.0

    def __post_init__(self) -> None:
        lim = self.task.spec.limits
        self.max_steps = self.max_steps or lim.max_steps
        self.wall_s = self.wall_s or self.limits.rollout_s or lim.wall_s
        self.tools = tool_schemas(self.task.spec.tools)
        self.messages = self.messages or initial_messages(self.task)
        self.policy_version = self.policy.version
        self.tool_limit = self.limits.tool_call_s or (lim.exec_timeout_s * 4 + 10.0)

    def rewind(self) -> bool:
        """Drop everything after the last snapshot (or everything); True if a snapshot is left to restore.

        The clocks go back too: work lost to an infrastructure fault does not
        eat into the policy's wall budget.
        """
        self.status, self.error, self.submitted = "truncated", None, False
        m = self.mark or _Mark("", 0, 0, 0, 0)
        if self.mark is None:
            self.messages = initial_messages(self.task)
        else:
            del self.messages[m.messages :]
        del self.steps[m.steps :], self.traces[m.traces :]
        self.step, self.play_ms, self.policy_ms, self.tool_ms = m.step, m.play_ms, m.policy_ms, m.tool_ms
        return self.mark is not None

    async def _act(self, req: ActRequest, remaining: float) -> Any:
        limit = min(remaining, self.limits.policy_turn_s) if self.limits.policy_turn_s else remaining
        # asyncio.timeout, not wait_for: no extra task per turn on the hot path
        if self.model_sem is None:
            async with asyncio.timeout(limit):
                return await self.policy.act(req)
        async with self.model_sem, asyncio.timeout(limit):
            return await self.policy.act(req)

    async def play(self, sandbox: Sandbox) -> None:
        """Run the agent loop on ``sandbox`` until a final status; SandboxError on an infra fault."""
        t_start = self._play_start = time.perf_counter()
        deadline = time.monotonic() + max(0.0, self.wall_s - self.play_ms / 1000)
        executor = ToolExecutor(
            sandbox, self.task.spec.tools, exec_timeout=self.task.spec.limits.exec_timeout_s
        )
        self.status = "truncated"
        try:
            while self.step < self.max_steps:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.status = "timeout"
                    return
                if await self._turn(executor, sandbox, remaining):
                    return
            self.status = "truncated"
        finally:
            self.play_ms += (time.perf_counter() - t_start) * 1000

    async def _turn(self, executor: ToolExecutor, sandbox: Sandbox, remaining: float) -> bool:
        """One policy turn and its tool calls; True when the episode reached a final status."""
        req = ActRequest(
            messages=list(self.messages), tools=self.tools, task=self.task,
            sample_index=self.sample_index, seed=self.seed, step=self.step,
        )  # fmt: skip
        tp = time.perf_counter()
        try:
            action = await self._act(req, remaining)
        except TimeoutError:
            if self.limits.policy_turn_s and remaining > self.limits.policy_turn_s:
                self.status, self.error = (
                    "policy_error",
                    f"policy turn exceeded {self.limits.policy_turn_s:g}s",
                )
            else:
                self.status = "timeout"
            return True
        except PolicyError as e:
            self.status, self.error = "policy_error", str(e)
            return True
        self.policy_ms += (time.perf_counter() - tp) * 1000
        self.step += 1
        msg = dict(action.message)
        msg.setdefault("role", "assistant")
        parse_errors = msg.pop("parse_errors", None) or []
        self.messages.append(msg)
        if action.trace is not None:
            self.traces.append({"turn": len(self.traces), "message_index": len(self.messages) - 1,
                                **action.trace.to_json()})  # fmt: skip
        calls = msg.get("tool_calls") or []
        if not calls:
            hint = NO_TOOL_CALL
            if parse_errors:
                hint = "Your tool call could not be parsed: " + "; ".join(map(str, parse_errors))[:500]
            self.messages.append({"role": "user", "content": hint})
            return False
        for call in calls:
            if await self._call(executor, call):
                self.submitted, self.status = True, "ok"
                return True
        if parse_errors:  # some calls ran, others were malformed: say which, do not drop them silently
            self.messages.append(
                {
                    "role": "user",
                    "content": "Some tool calls could not be parsed: "
                    + "; ".join(map(str, parse_errors))[:500],
                }
            )
        if self.snapshot_every and self.step % self.snapshot_every == 0:
            try:
                sid = await asyncio.wait_for(sandbox.snapshot(), self.tool_limit)
            except WorkspaceFault:
                return False  # the agent's own making (too large...): no checkpoint; the final diff says why
            elapsed = self.play_ms + (time.perf_counter() - self._play_start) * 1000
            self.mark = _Mark(sid, self.step, len(self.messages), len(self.steps), len(self.traces), elapsed,
                              self.policy_ms, self.tool_ms)  # fmt: skip
        return False

    async def _call(self, executor: ToolExecutor, call: dict[str, Any]) -> bool:
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        name, raw = str(fn.get("name", "")), fn.get("arguments", "")
        call_id = str(call.get("id", "")) if isinstance(call, dict) else ""
        tt = time.perf_counter()
        try:
            async with asyncio.timeout(self.tool_limit):
                outcome = await executor.run(name, raw)
        except TimeoutError:
            raise SandboxError(
                f"tool call {name} outlived its {self.tool_limit:g}s stage limit (sandbox hung)"
            ) from None
        dt = (time.perf_counter() - tt) * 1000
        self.tool_ms += dt
        full = outcome.output if outcome.error is None else f"error: {outcome.error}"
        obs, cut = truncate_observation(full)
        self.steps.append(
            ToolStep(
                index=len(self.steps), tool_call_id=call_id, name=name, arguments=_safe_args(raw),
                raw_arguments=raw if isinstance(raw, str) else "", output=full, observation_truncated=cut,
                exit_code=outcome.exit_code, error=outcome.error, duration_ms=dt,
            )
        )  # fmt: skip
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": obs})
        return outcome.submitted

    def trajectory(
        self, judge: Judge, *, group_id: str = "", run_id: str = "", traj_id: str | None = None
    ) -> Trajectory:
        """The unjudged record of this episode (reward None until :func:`judge_episode`)."""
        t = Trajectory(
            run_id=run_id, task_id=self.task.id, task_version=self.task.spec.version, task_digest=self.task.digest,
            family=self.task.spec.family, difficulty=self.task.spec.difficulty, group_id=group_id,
            sample_index=self.sample_index, policy=self.policy.name, policy_version=self.policy_version,
            judge_version=getattr(judge, "version", ""), status=self.status, messages=self.messages,
            steps=self.steps, traces=self.traces, error=self.error, submitted=self.submitted, tools=self.tools,
        )  # fmt: skip
        if traj_id is not None:
            t.id = traj_id
        return t


async def judge_trajectory(
    traj: Trajectory, task: Task, sandbox: Sandbox, judge: Judge, *, limits: StageLimits | None = None,
    judge_sem: asyncio.Semaphore | None = None, retries: int = 1,
) -> None:  # fmt: skip
    """Take the final diff from ``sandbox`` and score it (in place)."""
    limits = limits or StageLimits()
    diff = await asyncio.wait_for(sandbox.diff(), limits.sandbox_start_s)
    traj.diff = diff.to_json()
    await score_trajectory(traj, task, diff, judge, limits=limits, judge_sem=judge_sem, retries=retries)


def trajectory_usage(traj: Trajectory) -> Usage:
    """What the rollout spent, for the judge's ``usage`` component: tool calls and generated tokens."""
    tokens = sum(len(t.get("completion_ids") or ()) for t in traj.traces)
    return Usage(steps=len(traj.steps), tokens=tokens)


async def score_trajectory(
    traj: Trajectory, task: Task, diff: WorkspaceDiff, judge: Judge, *, limits: StageLimits | None = None,
    judge_sem: asyncio.Semaphore | None = None, retries: int = 1,
) -> None:  # fmt: skip
    """Score ``diff`` into ``traj`` (in place; no sandbox of the agent needed). A judge that fails
    or overruns its stage limit is retried, then the status is ``judge_error`` with reward None."""
    limits = limits or StageLimits()
    if traj.status == "policy_error":
        return
    if diff.flags:
        # the host refused the agent's workspace (too large, unrepresentable): 0, never half-judged
        traj.reward, traj.components, traj.flags = 0.0, {}, list(diff.flags)
        return
    last = ""
    usage = trajectory_usage(traj)
    for attempt in range(retries + 1):
        try:
            if judge_sem is None:
                res = await asyncio.wait_for(score_with_usage(judge, task, diff, usage), limits.judge_s)
            else:
                async with judge_sem:
                    res = await asyncio.wait_for(score_with_usage(judge, task, diff, usage), limits.judge_s)
        except TimeoutError:
            last = f"judge exceeded its {limits.judge_s:g}s stage limit"
        except JudgeError as e:
            last = str(e)
        except Exception as e:  # a crashing judge is the judge's fault, never the policy's
            last = "judge crashed: " + "".join(traceback.format_exception_only(e)).strip()
        else:
            traj.reward, traj.components, traj.flags, traj.tests = (
                res.reward,
                res.components,
                res.flags,
                res.tests,
            )
            traj.failing_tests = sorted(k for k, v in res.per_test.items() if v != "passed")
            traj.judge_version = res.judge_version
            return
        if attempt < retries:
            await asyncio.sleep(0.05 * 2**attempt)
    traj.status, traj.error, traj.reward = "judge_error", last, None


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
    """Play and judge one rollout on one sandbox (no continuation; the scheduler adds that)."""
    t0 = time.perf_counter()
    ep = Episode(
        task, policy, sample_index=sample_index, seed=seed, max_steps=max_steps or 0, wall_s=wall_s or 0.0
    )
    await ep.play(sandbox)
    traj = ep.trajectory(judge, group_id=group_id, run_id=run_id)
    tj = time.perf_counter()
    await judge_trajectory(traj, task, sandbox, judge)
    traj.timings = {
        "rollout_ms": ep.play_ms, "policy_ms": ep.policy_ms, "tool_ms": ep.tool_ms,
        "judge_ms": (time.perf_counter() - tj) * 1000, "total_ms": (time.perf_counter() - t0) * 1000,
    }  # fmt: skip
    return traj
