"""The Environment: one task, one sandbox, one conversation.

An outside loop needs nothing else to run an episode::

    from sparring.env import Environment

    with Environment.from_task("tasks/clamp-bug") as env:
        obs = env.reset(seed=0)                       # obs.messages, obs.tools
        while True:
            res = env.step(my_model(obs.messages + history, obs.tools))
            ...
            if res.terminated or res.truncated:
                break
    print(res.reward, res.info["components"], res.info["per_test"])

The Environment owns the episode's state machine: the messages, the tools (as
OpenAI schemas), the budgets (steps, wall clock, time per tool call), the
truncation of observations (full outputs kept in ``info``), the sandbox, and
the judge call when the agent submits or a budget ends it. Unknown tools and
bad arguments are observations, never exceptions; only infrastructure faults
raise (:class:`~sparring.errors.SandboxError`).

Async first (:meth:`areset`, :meth:`astep`, :meth:`aclose`); the sync forms run
them on an event loop of the Environment's own (a sandbox is bound to the loop
it was made on), so use one form or the other for a given Environment, and the
async form inside a running event loop (the sync form raises there).

Rollouts (:mod:`sparring.rollout.episode`) drive the same object with a
Policy: they attach sandboxes from a pool (:meth:`attach` / :meth:`detach`),
snapshot and rewind across sandbox faults (:meth:`asnapshot`, :meth:`rewind`),
and judge after releasing the sandbox (``judge_on_end=False``, :meth:`ajudge`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sparring.env.budgets import Budgets
from sparring.env.judging import Judgement, judge_diff, process_input
from sparring.env.prompts import NO_TOOL_CALL, initial_messages, unparsed_hint
from sparring.env.records import Observation, SampledTurn, StepResult
from sparring.env.tools import ToolExecutor, tool_schemas, truncate_observation
from sparring.errors import EnvironmentUsageError, SandboxError
from sparring.judge.base import Judge, Usage
from sparring.sandbox.base import Sandbox, SandboxBackend, WorkspaceDiff
from sparring.sandbox.config import BackendConfig, LocalBackendConfig, OCIBackendConfig, make_backend
from sparring.tasks.loader import Task, load_task
from sparring.tasks.sandbox_spec import aspec_for_task
from sparring.trajectory import Status, TokenTrace, ToolStep

T = TypeVar("T")
StepInput = dict[str, Any] | SampledTurn
"""What :meth:`Environment.step` takes: an assistant message, or a sampled turn (its text and tokens).
(Not the policy's :class:`~sparring.policy.base.Action`, which the rollout turns into one.)"""
EndStatus = Status


@dataclass(frozen=True)
class Mark:
    """Where a snapshot was taken: its id and the conversation's lengths and clocks at that moment."""

    snapshot_id: str
    step: int
    messages: int
    steps: int
    traces: int
    play_ms: float = 0.0
    tool_ms: float = 0.0


def _safe_args(raw: Any) -> dict[str, Any] | None:
    try:
        return ToolExecutor._parse(raw)
    except Exception:
        return None


class Environment:
    """One task, one sandbox, one conversation (see the module docstring)."""

    def __init__(
        self, task: Task, *, backend: SandboxBackend | BackendConfig | None = None, judge: Judge | None = None,
        budgets: Budgets | None = None, judge_on_end: bool = True,
    ) -> None:  # fmt: skip
        """``backend`` (a backend, or a :data:`~sparring.sandbox.config.BackendConfig` to make one) defaults
        to the local one; ``judge`` to the pytest judge over the same backend. Every sandbox spec names
        the task's pinned layer, so the agent's and the judge's sandboxes always share it."""
        self.task = task
        self.budgets = budgets or Budgets.for_task(task)
        self.tools = tool_schemas(task.spec.tools, task.spec.custom_tools)
        self.judge_on_end = judge_on_end
        self._backend_config: BackendConfig | None = None
        self._backend: SandboxBackend | None = None
        if isinstance(backend, LocalBackendConfig | OCIBackendConfig):
            self._backend_config = backend
        else:
            self._backend = backend
        self._judge = judge
        self._sandbox: Sandbox | None = None
        self._owned = False
        self._executor: ToolExecutor | None = None
        self._clock: float | None = None
        self._runner: asyncio.Runner | None = None
        self.seed = 0
        self._clear()

    @classmethod
    def from_task(
        cls, path: str | Path, *, backend: SandboxBackend | BackendConfig | None = None, judge: Judge | None = None,
        budgets: Budgets | None = None, **budget_overrides: Any,
    ) -> Environment:  # fmt: skip
        """The Environment of the task directory ``path``: its pinned layer, tools and limits
        (``max_steps=``, ``wall_s=``, ``exec_timeout_s=``... override single budgets)."""
        task = load_task(Path(path))
        if budgets is None:
            budgets = Budgets.for_task(task, **budget_overrides)
        elif budget_overrides:
            raise EnvironmentUsageError("give either budgets= or single budget overrides, not both")
        return cls(task, backend=backend, judge=judge, budgets=budgets)

    # -- state -----------------------------------------------------------------------------------

    def _clear(self) -> None:
        self.messages: list[dict[str, Any]] = initial_messages(self.task)
        self.steps: list[ToolStep] = []
        self.traces: list[TokenTrace] = []
        self.step_count = 0
        self.status: Status = "truncated"
        self.done = False
        self.error: str | None = None
        self.submitted = False
        self.play_ms = 0.0
        self.tool_ms = 0.0
        self.mark: Mark | None = None
        self.judgement: Judgement | None = None
        self.diff: WorkspaceDiff | None = None

    @property
    def backend(self) -> SandboxBackend:
        if self._backend is None:
            self._backend = make_backend(self._backend_config)  # mounts the layer the task's spec names
        assert self._backend is not None
        return self._backend

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            from sparring.judge.pytest_judge import PytestJudge

            self._judge = PytestJudge(self.backend)
        return self._judge

    @property
    def sandbox(self) -> Sandbox | None:
        return self._sandbox

    @property
    def public_status(self) -> str:
        """The status an outside loop sees: ``running`` until the episode ends, then its final status."""
        return self.status if self.done else "running"

    @property
    def reward(self) -> float | None:
        j = self.judgement
        return j.result.reward if j is not None and j.result is not None else None

    def elapsed_ms(self) -> float:
        """Play time so far (the clock runs while a sandbox is attached)."""
        return self.play_ms + ((time.perf_counter() - self._clock) * 1000 if self._clock is not None else 0.0)

    def remaining_s(self) -> float:
        """Seconds of the wall budget left: it bounds what the agent's commands take (tool calls),
        not the time a policy spends writing its turns (a slow model is not a slow environment)."""
        return self.budgets.wall_s - self.tool_ms / 1000

    def usage(self) -> Usage:
        """What the episode spent, for the judge's ``usage`` component: tool calls and generated tokens."""
        tokens = sum(len(t.completion_ids) for t in self.traces)
        return Usage(steps=len(self.steps), tokens=tokens)

    # -- sandbox ---------------------------------------------------------------------------------

    def attach(self, sandbox: Sandbox, *, owned: bool = False) -> None:
        """Play in ``sandbox`` from here on (the conversation is kept); starts the wall clock.
        An ``owned`` sandbox is closed by the Environment, a lent one (a pool's) never."""
        self._sandbox, self._owned = sandbox, owned
        self._executor = ToolExecutor(
            sandbox,
            self.task.spec.tools,
            exec_timeout=self.budgets.exec_timeout_s,
            custom=self.task.spec.custom_tools,
        )
        self._clock = time.perf_counter()

    def detach(self) -> Sandbox | None:
        """Stop the wall clock and let go of the sandbox (returned; not closed)."""
        if self._clock is not None:
            self.play_ms += (time.perf_counter() - self._clock) * 1000
            self._clock = None
        sb, self._sandbox, self._executor, self._owned = self._sandbox, None, None, False
        return sb

    async def _drop_sandbox(self) -> None:
        owned = self._owned
        sb = self.detach()
        if sb is not None and owned:
            await sb.close()

    async def asnapshot(self) -> Mark:
        """Snapshot the sandbox and remember how far the conversation had got (see :meth:`rewind`)."""
        sb = self._require_sandbox()
        sid = await asyncio.wait_for(sb.snapshot(), self.budgets.tool_call_s)
        self.mark = Mark(sid, self.step_count, len(self.messages), len(self.steps), len(self.traces),
                         self.elapsed_ms(), self.tool_ms)  # fmt: skip
        return self.mark

    def rewind(self) -> bool:
        """Drop everything after the last snapshot (or everything); True if a snapshot is left to
        restore into a fresh sandbox. The clocks go back too: work lost to an infrastructure fault
        does not eat into the wall budget."""
        self.status, self.error, self.submitted, self.done = "truncated", None, False, False
        self.judgement, self.diff = None, None
        m = self.mark or Mark("", 0, 0, 0, 0)
        if self.mark is None:
            self.messages = initial_messages(self.task)
        else:
            del self.messages[m.messages :]
        del self.steps[m.steps :], self.traces[m.traces :]
        self.step_count, self.play_ms, self.tool_ms = m.step, m.play_ms, m.tool_ms
        if self._clock is not None:
            self._clock = time.perf_counter()
        return self.mark is not None

    def _require_sandbox(self) -> Sandbox:
        if self._sandbox is None:
            raise EnvironmentUsageError("the Environment has no sandbox: call reset() (or areset()) first")
        return self._sandbox

    # -- the episode -----------------------------------------------------------------------------

    async def areset(self, seed: int = 0, *, sandbox: Sandbox | None = None) -> Observation:
        """Start a new episode in a fresh sandbox (or in ``sandbox``, lent by the caller)."""
        await self._drop_sandbox()
        self.seed = seed
        self._clear()
        if sandbox is None:
            spec = await aspec_for_task(self.task, seed=seed)
            sandbox = await asyncio.wait_for(self.backend.create(spec), self.budgets.sandbox_start_s)
            self.attach(sandbox, owned=True)
        else:
            self.attach(sandbox)
        return Observation(
            messages=[dict(m) for m in self.messages], tools=list(self.tools),
            info={"task_id": self.task.id, "task_digest": self.task.digest, "seed": seed,
                  "budgets": self.budgets.to_json()},
        )  # fmt: skip

    def check_budgets(self) -> bool:
        """End the episode if a budget is spent (steps first, then the wall clock); True if it is over."""
        if self.done:
            return True
        if self.step_count >= self.budgets.max_steps:
            self.end("truncated")
        elif self.remaining_s() <= 0:
            self.end("timeout")
        return self.done

    def end(self, status: EndStatus, error: str | None = None) -> None:
        """End the episode from outside (a loop's policy failed or ran out of time)."""
        self.status, self.error, self.done = status, error, True

    async def astep(self, action: StepInput, *, trace: TokenTrace | None = None) -> StepResult:
        """Apply one assistant turn: an OpenAI assistant message (``trace``: its tokens, kept for
        training) or a :class:`SampledTurn` (raw text and its trace; tool calls parsed from the text).
        The trace is kept in :attr:`traces`, placed at this turn and message."""
        self._require_sandbox()
        if self.done:
            raise EnvironmentUsageError(
                f"the episode is over (status {self.status}): call reset() to start another"
            )
        new: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        msg, trace = self._message(action, trace)
        self.step_count += 1
        parse_errors = msg.pop("parse_errors", None) or []
        self.messages.append(msg)
        if trace is not None:
            self.traces.append(trace.placed(len(self.traces), len(self.messages) - 1))
        calls = msg.get("tool_calls") or []
        if not calls:
            hint = unparsed_hint(parse_errors, False) if parse_errors else NO_TOOL_CALL
            new.append({"role": "user", "content": hint})
        for call in calls:
            step, submitted = await self._call(call)
            results.append(step.model_dump(mode="json"))
            new.append(self.messages[-1])
            if submitted:
                self.submitted = True
                self.end("ok")
                break
        if calls and parse_errors and not self.done:  # say which calls were dropped, never silently
            new.append({"role": "user", "content": unparsed_hint(parse_errors, True)})
        self.messages.extend(m for m in new if m["role"] == "user")
        self.check_budgets()
        return await self._result(new, results, len(calls))

    def _message(
        self, action: StepInput, trace: TokenTrace | None
    ) -> tuple[dict[str, Any], TokenTrace | None]:
        if isinstance(action, SampledTurn):
            from sparring.chat_format import parse_tool_calls, tool_call_count

            parsed = parse_tool_calls(action.text, self.tools)
            msg = parsed.to_message(id_offset=tool_call_count(self.messages))
            if parsed.errors:
                msg["parse_errors"] = list(parsed.errors)
            return msg, action.trace
        if not isinstance(action, dict):
            raise EnvironmentUsageError(
                f"an action is an assistant message dict or a SampledTurn, got {type(action).__name__}"
            )
        msg = dict(action)
        msg.setdefault("role", "assistant")
        return msg, trace

    async def _call(self, call: Any) -> tuple[ToolStep, bool]:
        """Run one tool call; its (truncated) observation goes into the conversation. True: submitted."""
        assert self._executor is not None
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        name, raw = str(fn.get("name", "")), fn.get("arguments", "")
        call_id = str(call.get("id", "")) if isinstance(call, dict) else ""
        limit = self.budgets.tool_call_s
        tt = time.perf_counter()
        try:
            async with asyncio.timeout(limit):
                outcome = await self._executor.run(name, raw)
        except TimeoutError:
            raise SandboxError(
                f"tool call {name} outlived its {limit:g}s stage limit (sandbox hung)"
            ) from None
        dt = (time.perf_counter() - tt) * 1000
        self.tool_ms += dt
        full = outcome.output if outcome.error is None else f"error: {outcome.error}"
        obs, cut = truncate_observation(full, self.budgets.observation_chars)
        step = ToolStep(
            index=len(self.steps), tool_call_id=call_id, name=name, arguments=_safe_args(raw),
            raw_arguments=raw if isinstance(raw, str) else "", output=full, observation_truncated=cut,
            exit_code=outcome.exit_code, error=outcome.error, duration_ms=dt,
        )  # fmt: skip
        self.steps.append(step)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": obs})
        return step, outcome.submitted

    async def _result(
        self, new: list[dict[str, Any]], results: list[dict[str, Any]], n_calls: int
    ) -> StepResult:
        if self.done and self.judge_on_end and self.judgement is None and self.status != "policy_error":
            await self.ajudge()
        info: dict[str, Any] = {"status": self.public_status, "step": self.step_count, "tool_calls": n_calls,
                                "tool_results": results, **self.judge_info()}  # fmt: skip
        if self.error:
            info["error"] = self.error
        return StepResult(
            messages=new, terminated=self.submitted,
            truncated=self.done and not self.submitted, reward=self.reward, info=info,
        )  # fmt: skip

    async def afinal_diff(self) -> WorkspaceDiff:
        """The agent's final workspace diff (taken once, from the attached sandbox)."""
        if self.diff is None:
            sb = self._require_sandbox()
            self.diff = await asyncio.wait_for(sb.diff(), self.budgets.sandbox_start_s)
        return self.diff

    async def ajudge(
        self, diff: WorkspaceDiff | None = None, *, sem: asyncio.Semaphore | None = None
    ) -> Judgement:
        """Score the final diff (``diff``, or the attached sandbox's) with retries; a judge that keeps
        failing makes the status ``judge_error`` (reward None)."""
        if diff is not None:
            self.diff = diff
        d = await self.afinal_diff()
        self.judgement = await judge_diff(self.judge, self.task, d, self.usage(), judge_s=self.budgets.judge_s,
                                          retries=self.budgets.judge_retries, sem=sem,
                                          process=process_input(self.task, self.messages, self.steps))  # fmt: skip
        if self.judgement.result is None:
            self.status, self.error = "judge_error", self.judgement.error
        return self.judgement

    def judge_info(self) -> dict[str, Any]:
        """The judgement as ``info`` fields (empty before judging)."""
        j = self.judgement
        if j is None:
            return {}
        if j.result is None:
            return {"judge_status": "judge_error", "judge_error": j.error}
        r = j.result
        return {"judge_status": r.status, "components": dict(r.components), "flags": list(r.flags),
                "tests": r.tests.model_dump(), "per_test": dict(r.per_test), "judge_version": r.judge_version}  # fmt: skip

    async def aclose(self) -> None:
        """Close the sandbox the Environment made (a lent one is only let go)."""
        await self._drop_sandbox()

    # -- sync forms and context managers ---------------------------------------------------------

    def _sync(self, coro: Coroutine[Any, Any, T], name: str) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise EnvironmentUsageError(
                f"Environment.{name}() was called inside a running event loop: use `await env.a{name}(...)`"
            )
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner.run(coro)

    def reset(self, seed: int = 0) -> Observation:
        """Sync form of :meth:`areset`."""
        return self._sync(self.areset(seed), "reset")

    def step(self, action: StepInput, *, trace: TokenTrace | None = None) -> StepResult:
        """Sync form of :meth:`astep`."""
        return self._sync(self.astep(action, trace=trace), "step")

    def close(self) -> None:
        """Sync form of :meth:`aclose`; also ends the Environment's own event loop."""
        if self._runner is None and self._sandbox is None:
            return
        try:
            self._sync(self.aclose(), "close")
        finally:
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Environment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
