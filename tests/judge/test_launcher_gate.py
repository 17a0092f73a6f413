"""The launcher configures pytest before it reads its job and takes the job at collection (``JobGate``):
what the job may carry is checked there, before ``start``, so a malformed job is the judge's fault."""

from __future__ import annotations

import asyncio

from sparring.judge.dynamic.probe import build_plan
from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.report import parse_report
from sparring.judge.runner.sandbox import JudgePool, launcher_job, run_in_sandbox
from sparring.tasks.loader import solution_diff


def _report(backend, task, args_of, pool=None):
    files, args = PytestJudge(backend).test_files(task, False)
    job = launcher_job(build_plan(files, 1).files, args_of(args), 1, False)

    async def go():
        return await run_in_sandbox(backend, task, solution_diff(task), job, dynamic_job=None, reference=None,
                                    pool=pool)  # fmt: skip

    out = asyncio.run(go())
    assert out.pytest is not None
    return parse_report(out.pytest.stdout)


def test_a_job_carrying_an_option_is_refused_before_start(backend, family_tasks):
    t = family_tasks["code-repair"]
    ok = _report(backend, t, lambda args: args)
    assert ok.started and ok.done and ok.outcomes  # positive control: the same job without the option runs
    for extra in (["--collect-only"], ["-p", "no:python"]):
        bad = _report(backend, t, lambda args, extra=extra: [*extra, *args])
        assert not bad.started and not bad.done and not bad.outcomes


def test_a_job_naming_nothing_to_collect_is_refused_before_start(backend, family_tasks):
    t = family_tasks["code-repair"]
    bad = _report(backend, t, lambda args: [a for a in args if a.startswith("--ignore=")])
    assert not bad.started and not bad.outcomes  # not the workspace's own tests, collected from the cwd


def test_a_prestarted_launcher_runs_the_job_it_is_given(backend, family_tasks):
    """The pool's launcher was configured before the candidate's files landed; it still collects the probes
    of its job and runs them on the files that are there when the job arrives."""
    t = family_tasks["code-repair"]
    pool = JudgePool(backend, max_idle=1)

    async def go():
        try:
            judge = PytestJudge(backend, pool=pool)
            first = await judge.score(t, solution_diff(t))
            await asyncio.sleep(0.5)  # the reset sandbox's launcher configures pytest meanwhile
            second = await judge.score(t, solution_diff(t))
            return first, second, pool.warm_launches
        finally:
            await pool.close()

    first, second, warm = asyncio.run(go())
    assert first.reward == second.reward == 1.0 and second.per_test == first.per_test
    if pool.enabled:
        assert warm >= 1
