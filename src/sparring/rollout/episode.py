"""One multi-turn rollout: a loop that drives an :class:`~sparring.env.Environment` with a Policy.

The Environment owns the episode's state machine (messages, tools, budgets,
the sandbox, observation truncation, the judge call); this loop owns what only
a rollout has: the policy call (its turn limit and the model semaphore), the
snapshot cadence, and the trajectory record.

Statuses (docs/rollouts.md): ``ok`` (submitted), ``truncated`` (step budget),
``timeout`` (wall budget), ``policy_error``, ``judge_error``. Sandbox faults
(and a tool call or sandbox start that outlives its stage limit) raise
:class:`SandboxError` so the scheduler can retry on a fresh sandbox: they are
``infra_error`` only once retries are spent. What the agent made and the host
refuses to carry (a workspace beyond its quota, names a diff cannot hold) is
the agent's doing, not the infrastructure's: the diff comes back flagged and
scores 0 with the flag, and a checkpoint that cannot be taken is skipped.

The Environment keeps its state across a change of sandbox, so a rollout whose
sandbox dies can continue: every ``snapshot_every`` steps the sandbox is
snapshotted and the Environment remembers how far the conversation had got;
the scheduler restores the snapshot into a fresh sandbox, :meth:`Episode.rewind`
drops the turns after it, and :meth:`Episode.play` carries on.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from sparring.env.budgets import Budgets
from sparring.env.environment import Environment, Mark
from sparring.env.judging import Judgement, judge_diff, process_input
from sparring.env.prompts import NO_TOOL_CALL, SYSTEM_PROMPT, initial_messages
from sparring.errors import PolicyError, WorkspaceFault
from sparring.judge.base import Judge, Usage
from sparring.policy.base import Action, ActRequest, Policy, PolicyTask, policy_for_task
from sparring.rollout.branching import BranchPlan, BranchPoint, capture_extras, fork_episode
from sparring.sandbox.base import Sandbox, WorkspaceDiff
from sparring.tasks.loader import Task
from sparring.trajectory import Status, TokenTrace, ToolStep, Trajectory

__all__ = [
    "NO_TOOL_CALL",
    "SYSTEM_PROMPT",
    "Episode",
    "StageLimits",
    "apply_judgement",
    "initial_messages",
    "judge_trajectory",
    "run_episode",
    "score_trajectory",
    "trajectory_usage",
]


POLICY_TURN_S = 600.0
"""Default seconds for one policy turn: a 135M model on 2 busy cores writes ~2 tokens/s."""


@dataclass(frozen=True)
class StageLimits:
    """Per-stage time limits in seconds (None: the stage's own default).

    A stage that overruns is typed by who owns it: sandbox start and tool calls
    are infrastructure (retried), a policy turn is ``policy_error``, the agent's
    commands past the task's wall budget are ``timeout``, the judge is ``judge_error``.
    The policy's time is its own: it never counts against the task's wall budget.
    """

    sandbox_start_s: float = 120.0
    """Acquiring (creating or restoring) a sandbox."""
    tool_call_s: float | None = None
    """One tool call, beyond which the sandbox counts as hung (default: 4x the task's exec timeout + 10 s)."""
    policy_turn_s: float | None = None
    """One policy turn (default: :data:`POLICY_TURN_S`); beyond it the episode is ``policy_error``."""
    rollout_s: float | None = None
    """What the agent's commands may take in all (default: the task's ``limits.wall_s``)."""

    @property
    def turn_s(self) -> float:
        """The policy's budget for one turn."""
        return self.policy_turn_s or POLICY_TURN_S

    judge_s: float = 600.0
    """Scoring one final workspace."""

    def budgets(self, task: Task, max_steps: int = 0, wall_s: float = 0.0) -> Budgets:
        """The Environment's budgets for ``task`` under these limits."""
        return Budgets.for_task(
            task, max_steps=max_steps or None, wall_s=wall_s or self.rollout_s, tool_call_s=self.tool_call_s,
            sandbox_start_s=self.sandbox_start_s, judge_s=self.judge_s,
        )  # fmt: skip


@dataclass
class Episode:
    """One rollout: an Environment (the state, which survives a change of sandbox) and a policy."""

    task: Task
    policy: Policy
    sample_index: int = 0
    seed: int = 0
    max_steps: int = 0
    wall_s: float = 0.0
    limits: StageLimits = field(default_factory=StageLimits)
    snapshot_every: int = 0
    model_sem: asyncio.Semaphore | None = None
    policy_ms: float = 0.0
    policy_version: int = 0
    branch: BranchPlan | None = None
    """Where to take branch points (forked rollouts, :mod:`sparring.rollout.branching`); None: nowhere."""
    branch_points: list[BranchPoint] = field(default_factory=list)
    env: Environment = field(init=False)
    actor: Policy = field(init=False)
    """The policy bound to this episode's task (:func:`~sparring.policy.base.policy_for_task`)."""
    view: PolicyTask = field(init=False)
    """What the policy sees of the task: its requests carry this, never the task."""
    _policy_ms_at_mark: float = 0.0

    def __post_init__(self) -> None:
        budgets = self.limits.budgets(self.task, self.max_steps, self.wall_s)
        self.env = Environment(self.task, budgets=budgets, judge_on_end=False)
        self.env.seed = self.seed
        self.max_steps, self.wall_s = budgets.max_steps, budgets.wall_s
        self.policy_version = self.policy.version
        self.actor = policy_for_task(self.policy, self.task)
        self.view = PolicyTask.of(self.task)

    # the record's fields, read from the Environment
    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.env.messages

    @property
    def steps(self) -> list[ToolStep]:
        return self.env.steps

    @property
    def traces(self) -> list[TokenTrace]:
        return self.env.traces

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.env.tools

    @property
    def step(self) -> int:
        return self.env.step_count

    @property
    def status(self) -> Status:
        return self.env.status

    @property
    def error(self) -> str | None:
        return self.env.error

    @property
    def submitted(self) -> bool:
        return self.env.submitted

    @property
    def play_ms(self) -> float:
        return self.env.play_ms

    @property
    def tool_ms(self) -> float:
        return self.env.tool_ms

    @property
    def mark(self) -> Mark | None:
        return self.env.mark

    @mark.setter
    def mark(self, value: Mark | None) -> None:
        self.env.mark = value

    def rewind(self) -> bool:
        """Drop everything after the last snapshot (or everything); True if a snapshot is left to restore.

        The clocks go back too: work lost to an infrastructure fault does not
        eat into the policy's wall budget.
        """
        self.policy_ms = self._policy_ms_at_mark if self.env.mark is not None else 0.0
        kept = self.env.mark.step if self.env.mark is not None else 0
        self.branch_points = [b for b in self.branch_points if b.turn <= kept]  # later turns are replayed
        return self.env.rewind()

    async def _act(self, req: ActRequest) -> Action:
        limit = self.limits.turn_s  # the policy's own budget: the task's wall clock is the commands'

        # asyncio.timeout, not wait_for: no extra task per turn on the hot path
        if self.model_sem is None:
            async with asyncio.timeout(limit):
                return await self.actor.act(req)
        async with self.model_sem, asyncio.timeout(limit):
            return await self.actor.act(req)

    async def play(self, sandbox: Sandbox) -> None:
        """Run the agent loop on ``sandbox`` until a final status; SandboxError on an infra fault."""
        env = self.env
        env.attach(sandbox)
        try:
            while not env.check_budgets():
                await self._turn()
        finally:
            env.detach()

    async def _turn(self) -> None:
        """One policy turn, applied to the Environment."""
        env = self.env
        req = ActRequest(
            messages=list(env.messages), tools=env.tools, task=self.view,
            sample_index=self.sample_index, seed=self.seed, step=env.step_count, traces=list(env.traces),
        )  # fmt: skip
        tp = time.perf_counter()
        try:
            action = await self._act(req)
        except TimeoutError:
            env.end(
                "policy_error", f"policy turn exceeded {self.limits.turn_s:g}s (raise --policy-turn-timeout)"
            )
            return
        except PolicyError as e:
            env.end("policy_error", str(e))
            return
        self.policy_ms += (time.perf_counter() - tp) * 1000
        res = await env.astep(action.message, trace=action.trace)
        if self.branch is not None and not res.done and self.branch.forks_at(env.step_count):
            await self._branch_point()
        every = self.snapshot_every
        if every and not res.done and res.info.get("tool_calls") and env.step_count % every == 0:
            try:
                await env.asnapshot()
            except WorkspaceFault:
                return  # the agent's own making (too large...): no checkpoint; the final diff says why
            self._policy_ms_at_mark = self.policy_ms

    async def _branch_point(self) -> None:
        """Snapshot the workspace and archive /tmp and home: the state branches start from."""
        env = self.env
        if any(b.turn == env.step_count for b in self.branch_points):
            return
        sb = env.sandbox
        assert sb is not None
        try:
            mark = await env.asnapshot()
            extras = await capture_extras(sb, timeout=self.env.budgets.tool_call_s)
        except WorkspaceFault:
            return  # the agent's own making (too large...): no branch point here
        self._policy_ms_at_mark = self.policy_ms
        self.branch_points.append(BranchPoint(env.step_count, mark, extras, len(env.traces)))

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

    def fork(self, point: BranchPoint, k: int) -> Episode:
        """Branch ``k`` of this episode at ``point`` (see :func:`~sparring.rollout.branching.fork_episode`)."""
        return fork_episode(self, point, k)


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
    tokens = sum(len(t.completion_ids) for t in traj.traces)
    return Usage(steps=len(traj.steps), tokens=tokens)


async def score_trajectory(
    traj: Trajectory, task: Task, diff: WorkspaceDiff, judge: Judge, *, limits: StageLimits | None = None,
    judge_sem: asyncio.Semaphore | None = None, retries: int = 1,
) -> None:  # fmt: skip
    """Score ``diff`` into ``traj`` (in place; no sandbox of the agent needed) with the Environment's
    judge call: a judge that fails or overruns its stage limit is retried, then the status is
    ``judge_error`` with reward None."""
    limits = limits or StageLimits()
    if traj.status == "policy_error":
        return
    # a flagged diff is never judged (judge_diff), so there is no process to check on it
    process = None if diff.flags else process_input(task, traj.messages, traj.steps)
    j = await judge_diff(judge, task, diff, trajectory_usage(traj), judge_s=limits.judge_s, retries=retries,
                         sem=judge_sem, process=process)  # fmt: skip
    apply_judgement(traj, j)


def apply_judgement(traj: Trajectory, j: Judgement) -> None:
    """Write a judgement into ``traj`` (in place): the one place a verdict reaches a trajectory.

    A judge that failed makes the status ``judge_error`` with reward None; a verdict (a flagged diff's
    included: 0 with its flags, :func:`~sparring.env.judging.judge_diff`) sets reward, components,
    flags, tests, the failing tests and the judge version."""
    res = j.result
    if res is None:
        traj.status, traj.error, traj.reward = "judge_error", j.error, None
        return
    traj.reward, traj.components, traj.flags, traj.tests = res.reward, res.components, res.flags, res.tests
    traj.failing_tests = sorted(k for k, v in res.per_test.items() if v != "passed")
    traj.judge_version = res.judge_version


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
