"""The pytest judge (v2): score the agent's diff on a pristine copy, trusting nothing the agent touched.

1. Static hack checks and static components on the diff, on the host
   (:mod:`~sparring.judge.static.hacks`, :mod:`~sparring.judge.static.components`).
2. The judge's tests (hidden ones and pristine copies of the visible ones) are
   rewritten on the host into probes (:mod:`~sparring.judge.dynamic.probe`): every assert
   only *observes* the candidate's value; the expected side stays here.
3. A fresh sandbox over the task's *initial* workspace; the diff is applied and
   the launcher runs the probes (:mod:`~sparring.judge.runner.sandbox`). The
   candidate controls that process, so its report is a claim: a test passes only
   if it ran to the end, every observation matches the withheld expectation and
   it observed each site as often as the reference solution did
   (:mod:`~sparring.judge.withheld`). Skipped, xfailed, xpassed, missing and
   errors count as failures.
   Whose fault a broken run is: the launcher reports ``start`` before candidate
   code can run, and the same launcher ran the reference to its end, so a run
   that started and then died or hung is the candidate's (reward 0 with
   ``candidate_crashed`` / ``candidate_timeout``); a runner that never started,
   or a sandbox that failed, is the judge's (``judge_error``).
4. Dynamic tests (``hidden/dynamic.json``): fresh inputs, reference vs candidate
   in separate processes, exact-typed comparison here (inputs on which the
   reference itself fails are unusable where the spec says ``reference_raises:
   skip``).
5. Components -> reward via :func:`~sparring.judge.reward.compose_reward`;
   with the rollout's usage (steps, tokens), also the ``usage`` component, which
   counts only for a correct answer and only with a weight in the task's
   ``judge.weights`` (none by default).

Configs: ``train`` runs hidden/ without hidden/eval/; ``eval`` runs only
hidden/eval/ (expected ids in ``hidden/eval/expected_tests.txt``), so the
evaluation judge's tests never shape training rewards.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sparring.errors import TaskError
from sparring.judge.base import JudgeResult, JudgeRunError, Usage, judge_error_result
from sparring.judge.dynamic import inputs as dyn
from sparring.judge.dynamic.probe import ProbePlan, build_plan
from sparring.judge.records import TestCounts
from sparring.judge.report import RunReport, parse_report, split_ids
from sparring.judge.reward import components_from_tests, compose_reward, efficiency, usage_efficiency
from sparring.judge.runner.sandbox import (
    JudgePool,
    RunOutput,
    hidden_test_files,
    launcher_job,
    regression_files,
    run_in_sandbox,
)
from sparring.judge.static.components import static_components
from sparring.judge.static.hacks import static_flags
from sparring.judge.static.importable import split_importable
from sparring.judge.trace_cache import TraceCache, task_trace_key
from sparring.judge.version import judge_version
from sparring.judge.withheld import SKIPPED, HostOutcomes, RefTrace, host_outcomes, reference_trace
from sparring.sandbox.base import SandboxBackend, WorkspaceDiff
from sparring.tasks import taskfs
from sparring.tasks.hidden_suite import EVAL_DIR, EVAL_IDS_FILE, eval_ids
from sparring.tasks.loader import Task


class JudgeConfig(BaseModel):
    """What a judge instance does; part of its version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    split: Literal["train", "eval"] = Field(
        "train", description="train: hidden/ minus hidden/eval/; eval: hidden/eval/ only."
    )
    regression: bool = Field(True, description="Also run pristine copies of the task's visible tests.")
    dynamic: bool = Field(True, description="Run hidden/dynamic.json generated tests when a task has them.")
    dynamic_seed: int | None = Field(
        None, description="Fixed seed for generated inputs (None: fresh each evaluation)."
    )
    shuffle_seed: int | None = Field(None, description="Fixed test-order seed (None: fresh each evaluation).")
    tokens_per_step: int = Field(
        256,
        ge=0,
        description="Token budget of the usage component: this many generated tokens per step allowed.",
    )


def tampering(diff: WorkspaceDiff) -> list[str]:
    """Paths of the diff that touch tests or test configuration (kept for callers of judge v1)."""
    from sparring.judge.static.hacks import CONFIG_NAMES, STARTUP_NAMES, is_test_path

    touched = [*diff.files, *diff.deleted]
    names = CONFIG_NAMES | STARTUP_NAMES | {"pyproject.toml"}
    return sorted(p for p in touched if is_test_path(p) or p.split("/")[-1] in names or p.endswith(".pth"))


def _read_report(stdout: str, plan: ProbePlan, trace: RefTrace) -> tuple[RunReport, HostOutcomes]:
    """The launcher's report and the host's outcomes from it: CPU work over the candidate's bytes, run in a
    worker thread (linear and capped: :mod:`sparring.judge.report`)."""
    rep = parse_report(stdout)
    return rep, host_outcomes(rep, plan, trace)


class PytestJudge:
    """Judge kind ``pytest``. Stateless; safe to share across concurrent rollouts."""

    def __init__(
        self,
        backend: SandboxBackend,
        limits: bool = True,
        config: JudgeConfig | None = None,
        pool: JudgePool | None = None,
        trace_cache: TraceCache | None | Literal["default"] = "default",
    ) -> None:
        """``trace_cache``: where reference traces are kept between processes (:mod:`sparring.judge.trace_cache`;
        ``"default"``: ``$SPARRING_TRACE_CACHE`` or ``~/.cache/sparring/judge-traces``; None: this judge's
        memory only, so its first judgement of each task runs the reference's probes)."""
        self.backend = backend
        self.limits = limits
        self.pool = pool  # warm sandboxes reset between judgements (throughput); None: fresh each time
        self.config = config or JudgeConfig()
        # The reference solution's trace per (task digest, split, regression): the same for every judgement.
        self._traces: dict[tuple[str, bool, bool], RefTrace] = {}
        self.trace_cache = TraceCache.default() if trace_cache == "default" else trace_cache
        # Seeds are per evaluation, not part of what the judge *is*.
        self.version = judge_version(self.config.model_dump(exclude={"dynamic_seed", "shuffle_seed"}))

    def has_eval_split(self, task: Task) -> bool:
        return taskfs.is_file(task.hidden, f"{EVAL_DIR}/{EVAL_IDS_FILE}")

    def uses_eval_split(self, task: Task) -> bool:
        """The eval judge runs hidden/eval/ where a task has one; a task without one falls back to the
        training tests (recorded as metric ``eval_split`` = 0, so reports can tell)."""
        return self.config.split == "eval" and self.has_eval_split(task)

    def expected_ids(self, task: Task) -> list[str]:
        if not self.uses_eval_split(task):
            return [t for t in task.spec.judge.hidden_tests if not t.startswith(EVAL_DIR + "/")]
        return eval_ids(task) or []

    async def score_or_error(
        self, task: Task, diff: WorkspaceDiff, usage: Usage | None = None
    ) -> JudgeResult:
        """Like :meth:`score`, but a judge failure is a typed ``judge_error`` result."""
        try:
            return await self.score(task, diff, usage=usage)
        except JudgeRunError as e:
            return judge_error_result(e, self.version)

    accepts_usage = True

    def expect(self, task: Task, n: int = 1) -> None:
        """``n`` judgements of ``task`` are coming (:func:`sparring.judge.base.expect_judgements`)."""
        if self.pool is not None and self.pool.enabled:
            self.pool.expect(task, n)

    def usage_components(self, task: Task, usage: Usage) -> tuple[float, dict[str, float]]:
        """The ``usage`` component (1 - spent/budget, steps and tokens averaged) and its raw numbers."""
        max_steps = usage.max_steps if usage.max_steps is not None else task.spec.limits.max_steps
        max_tokens = (
            usage.max_tokens if usage.max_tokens is not None else max_steps * self.config.tokens_per_step
        )
        value = usage_efficiency(usage.steps, max_steps, usage.tokens, max_tokens)
        return value, {"usage_steps": float(usage.steps), "usage_tokens": float(usage.tokens),
                       "usage_max_steps": float(max_steps), "usage_max_tokens": float(max_tokens)}  # fmt: skip

    async def score(self, task: Task, diff: WorkspaceDiff, usage: Usage | None = None) -> JudgeResult:
        """Score ``diff``; with ``usage`` (steps and tokens the agent spent), also the ``usage`` component."""
        t0 = time.perf_counter()
        cfg = self.config
        expected = self.expected_ids(task)
        if diff.flags:
            # The host refused part of the workspace (too large, unreadable, unrepresentable names): a
            # verdict on what is left would score a different workspace, so it is 0 with the reason.
            return self._result(task, expected, {}, {}, {}, list(diff.flags), t0, diff.detail, None)
        evaluating = self.uses_eval_split(task)
        dseed = cfg.dynamic_seed if cfg.dynamic_seed is not None else secrets.randbits(31)
        job = None
        try:
            dspec = dyn.load_dynamic(task.hidden) if cfg.dynamic and not evaluating else None
            if dspec is not None:
                job = dspec.job(dseed, task.spec.judge.timeout_s)
        except TaskError as e:
            raise JudgeRunError("bad_task", str(e)) from None
        files, args = self.test_files(task, evaluating)
        shuffle = cfg.shuffle_seed if cfg.shuffle_seed is not None else secrets.randbits(31)
        allow_binary = bool(task.spec.judge.allow_binary_modules)
        coin = secrets.randbits(31)  # fresh coin flips for every judgement
        trace_key = (task.digest, evaluating, cfg.regression)
        trace = self._traces.get(trace_key)
        stored_key = None
        if trace is None and self.trace_cache is not None:
            stored_key = task_trace_key(task, self.version, evaluating)
            trace = await asyncio.to_thread(self.trace_cache.get, stored_key)  # a file read: off the loop
            if trace is not None:
                self._traces[trace_key] = trace
        ref_plan = None if trace is not None else build_plan(files, secrets.randbits(31))
        made: list[ProbePlan] = []

        def candidate_job(out: RunOutput) -> bytes:
            """The candidate's probes, made once the reference's trace says which sites stay truth-valued."""
            nonlocal trace
            if trace is None:
                assert ref_plan is not None
                trace = self._traces[trace_key] = reference_trace(out.reference_pytest, ref_plan)
                if stored_key is not None and self.trace_cache is not None:
                    self.trace_cache.put(stored_key, trace)
            made.append(build_plan(files, coin, fallback=trace.fallback))
            return launcher_job(made[0].files, args, shuffle, allow_binary)

        ref = None
        if job is not None or ref_plan is not None:
            sol_files, deleted = task.solution_files()
            ref = WorkspaceDiff(files=sol_files, deleted=tuple(deleted))
        allowed = task.spec.judge.allow_binary_modules
        flags = static_flags(diff, task.workspace, allowed=allowed)
        # The static components read only the diff and the initial state; most of their time is ruff, a
        # subprocess: they are computed in a thread while the sandbox runs, not before it.
        static = asyncio.ensure_future(asyncio.to_thread(static_components, diff, task.workspace))
        static.add_done_callback(lambda f: f.cancelled() or f.exception())  # a failed run outranks it
        # Only what the checks can read is written into the judge's sandbox: extension modules, bytecode,
        # archives and .pth files of the diff (flagged above) never reach it.
        diff, _, removed = split_importable(diff, allowed)
        run = await run_in_sandbox(
            self.backend, task, diff, candidate_job,
            dynamic_job=job, reference=ref, limits=self.limits, pool=self.pool,
            reference_job=None if ref_plan is None else launcher_job(ref_plan.files, args, shuffle, allow_binary),
        )  # fmt: skip
        comps, metrics = await static
        metrics["files_withheld"] = float(len(removed))
        if usage is not None:
            comps["usage"], more = self.usage_components(task, usage)
            metrics.update(more)
        assert trace is not None and made, "run_in_sandbox makes the candidate's job before running it"
        plan = made[0]
        metrics["unverifiable_sites"] = float(len(trace.unverifiable))
        # whether this judgement ran the reference's probes (no trace in memory or in the trace cache)
        metrics["reference_trace_run"] = float(ref_plan is not None)
        metrics["withheld_sites"] = float(sum(1 for s in plan.sites.values() if s.kind != "bool"))
        metrics["truth_valued_sites"] = float(sum(1 for s in plan.sites.values() if s.kind == "bool"))
        metrics["observed_sites"] = float(len(plan.sites))
        if not run.applied:
            flags.append("diff_not_applicable")
            return self._result(
                task, expected, {}, comps, metrics, flags, t0, run.apply_error, dseed if job else None
            )
        if run.sandbox_killed:
            # Its exec server or channel died after the candidate's run started: the candidate's doing (a
            # fault of the judge before that point raised sandbox_failed instead).
            flags.append("sandbox_killed")
            return self._result(
                task, expected, {}, comps, metrics, flags, t0, run.sandbox_killed, dseed if job else None
            )
        r = run.pytest
        assert r is not None
        log = r.stderr[-4000:]  # stdout is the report channel
        # The candidate's process wrote the report: its reading (linear, capped) stays off the event loop.
        rep, (outcomes, rejected) = await asyncio.to_thread(_read_report, r.stdout, plan, trace)
        if not rep.started:
            # "start" is written before any candidate code can run: without it the judge never came up.
            if r.timed_out:
                raise JudgeRunError(
                    "judge_timeout", f"the test runner did not start within {task.spec.judge.timeout_s}s"
                )
            raise JudgeRunError(
                "runner_crashed",
                f"the test runner died before running any test (exit {r.exit_code}): {log[-600:]}",
            )
        flags += rep.audit_flags
        if rep.over_cap:
            flags.append("forged_report")  # no launcher of the judge's writes past the caps
            metrics["report_over_cap"] = 1.0
        if r.timed_out:
            flags.append(
                "candidate_timeout"
            )  # the same runner finished on the reference: the hang is the candidate's
        elif not rep.done:
            flags.append("candidate_crashed")
            metrics["candidate_oom"] = 1.0 if r.oom_killed else 0.0
        metrics["claims_rejected"] = float(len(rejected))
        if any(why.endswith(f"({SKIPPED})") for _, why in rejected):
            # A test said it passed without reaching asserts the reference reaches: its code was cut short.
            flags.append("assertions_skipped")
        if rejected:
            log = (log + "\nnot passed on the host: " + "; ".join(f"{t}: {w}" for t, w in rejected[:5]))[
                -4000:
            ]
        prefix = f"hidden/{EVAL_DIR}" if evaluating else "hidden"
        hidden = split_ids(outcomes, prefix)
        metrics["test_wall_s"] = round(run.pytest_wall_s, 4)
        if cfg.split == "eval":
            metrics["eval_split"] = 1.0 if evaluating else 0.0
        metrics["collect_errors"] = float(len(rep.collect_errors))
        comps["efficiency"] = efficiency(run.pytest_wall_s, task.spec.judge.timeout_s)
        if "regress" in args:
            reg = split_ids(outcomes, "regress")
            reg_errors = sum(1 for k in rep.collect_errors if k.startswith("regress"))
            total = len(reg) + reg_errors
            comps["regression"] = (sum(1 for v in reg.values() if v == "passed") / total) if total else 0.0
        if job is not None:
            assert run.reference is not None
            assert dspec is not None
            if run.candidate is None and not r.timed_out:
                flags.append(
                    "candidate_crashed"
                )  # the driver ran the reference, so its death is the candidate's
            frac, mism = dyn.compare(run.reference, run.candidate, dspec.reference_raises)
            comps["dynamic"] = frac
            metrics["dynamic_cases"] = float(len(job["inputs"]))
            metrics["dynamic_mismatches"] = float(mism)
            if dspec.reference_raises != "match" or dspec.call_timeout_s is not None:
                usable = len(dyn.usable_cases(run.reference, dspec.reference_raises))
                metrics["dynamic_unusable"] = float(len(job["inputs"]) - usable)
        return self._result(task, expected, hidden, comps, metrics, flags, t0, log, dseed if job else None)

    def test_files(self, task: Task, evaluating: bool) -> tuple[dict[str, bytes], list[str]]:
        """The judge's test files (rel to the probe root: ``hidden/...``, ``regress/...``) and what to collect."""
        hidden = hidden_test_files(task)
        eval_prefix = EVAL_DIR + "/"
        if evaluating:
            files = {f"hidden/{r}": b for r, b in hidden.items() if r.startswith(eval_prefix)}
            args = [f"hidden/{EVAL_DIR}"]
        else:
            files = {f"hidden/{r}": b for r, b in hidden.items() if not r.startswith(eval_prefix)}
            args = ["hidden"] + (
                [f"--ignore=hidden/{EVAL_DIR}"] if taskfs.is_dir(task.hidden, EVAL_DIR) else []
            )
        if self.config.regression:
            reg = regression_files(task)
            files.update({f"regress/{r}": b for r, b in reg.items()})
            if reg:
                args.append("regress")
        return files, args

    def _result(
        self,
        task: Task,
        expected: list[str],
        outcomes: dict[str, str],
        comps: dict[str, float],
        metrics: dict[str, float],
        flags: list[str],
        t0: float,
        log: str,
        dseed: int | None,
    ) -> JudgeResult:
        scored = {t: outcomes.get(t, "missing") for t in expected} if expected else dict(outcomes)
        # Unlisted hidden tests are reported too (admission's regression rule reads them), never scored.
        per_test = {**scored, **{t: v for t, v in sorted(outcomes.items()) if t not in scored}}
        hidden = components_from_tests(expected, outcomes)
        comps = dict(comps)
        comps["hidden_fraction"] = hidden["pass_fraction"]
        comps["hidden_all_pass"] = hidden["all_pass"]
        if "dynamic" in comps:
            comps["pass_fraction"] = (hidden["pass_fraction"] + comps["dynamic"]) / 2
            comps["all_pass"] = 1.0 if hidden["all_pass"] == 1.0 and comps["dynamic"] == 1.0 else 0.0
        else:
            comps["pass_fraction"], comps["all_pass"] = hidden["pass_fraction"], hidden["all_pass"]
        counts = TestCounts(
            passed=sum(1 for v in scored.values() if v == "passed"),
            failed=sum(1 for v in scored.values() if v not in ("passed", "error")),
            errors=sum(1 for v in scored.values() if v == "error"),
        )
        flags = sorted(set(flags))
        return JudgeResult(
            reward=compose_reward(comps, task.spec.judge.weights, flags),
            components={k: round(v, 6) for k, v in sorted(comps.items())},
            flags=flags,
            judge_version=self.version,
            tests=counts,
            per_test=per_test,
            metrics=metrics,
            dynamic_seed=dseed,
            duration_ms=(time.perf_counter() - t0) * 1000,
            log=log,
        )
