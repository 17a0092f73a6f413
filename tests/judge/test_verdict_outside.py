"""The verdict is made where the candidate cannot reach (issue 14, "Reporter in the candidate's process").

Each attack runs as candidate code inside the judge's sandbox, through the real judge: it takes the
test process over (finds the reporter and the observation recorder through the garbage collector,
claims every test passed, forges observations), crashes it, or searches the sandbox for the expected
values. A positive control shows each payload ran; the assertions show it bought nothing.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.quality.redteam import BOOL_POLARITY_FORGERY, COUNT_WITHOUT_VALUES, PARSER_BOMB
from sparring.judge.runner import sandbox as sandbox_runner
from sparring.judge.trace_cache import TraceCache
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.attacks import target
from sparring.tasks.hack_payloads import COMPILED_EXIT, OBSERVATION_FORGERY, REPORTER_REWRITE, SEGFAULT
from sparring.tasks.loader import solution_diff

FAMILIES = ["clamp", "code-repair", "function-impl"]


def run(judge, task, diff):
    return asyncio.run(judge.score_or_error(task, diff))


def appended(task, code: str, base: WorkspaceDiff | None = None) -> WorkspaceDiff:
    rel = target(task)
    files = dict(base.files) if base is not None else {}
    start = files.get(rel) or (task.workspace / rel).read_bytes()
    return WorkspaceDiff(files={**files, rel: start + b"\n" + code.encode()})


@pytest.fixture(scope="module")
def judge(backend):
    return PytestJudge(backend)


@pytest.mark.parametrize("payload", ["reporter_rewrite", "observation_forgery"])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_test_process_taken_over_cannot_claim_a_pass(judge, family_tasks, family, payload):
    t = family_tasks[family]
    code = REPORTER_REWRITE if payload == "reporter_rewrite" else OBSERVATION_FORGERY
    initial = run(judge, t, WorkspaceDiff())
    r = run(judge, t, appended(t, code))
    assert r.status == "ok", r.log
    # Positive control: the payload ran and every test the host failed had been claimed a pass.
    failed = r.tests.failed + r.tests.errors
    assert failed > 0 and r.metrics["claims_rejected"] >= r.tests.failed, (r.metrics, r.per_test)
    assert r.reward == 0.0 and r.components["all_pass"] == 0.0
    assert r.components["hidden_fraction"] <= initial.components["hidden_fraction"], (
        r.per_test,
        initial.per_test,
    )


@pytest.mark.parametrize("family", ["clamp", "code-repair"])
def test_taking_over_the_process_on_a_correct_solution_still_needs_every_observation(
    judge, family_tasks, family
):
    """Control for the above: the reference with the recorder silenced fails (the observations are what
    passes a test, not the claim), while the plain reference passes."""
    t = family_tasks[family]
    ref = solution_diff(t)
    assert run(judge, t, ref).reward == 1.0
    r = run(judge, t, appended(t, REPORTER_REWRITE, base=ref))
    assert r.components["all_pass"] == 0.0 and r.reward == 0.0 and "assertions_skipped" in r.flags


@pytest.mark.parametrize("payload", ["segfault", "compiled_exit"])
@pytest.mark.parametrize("family", ["clamp", "dynamic"])
def test_a_candidate_that_kills_the_test_process_scores_zero_not_a_judge_error(
    judge, family_tasks, family, payload
):
    t = family_tasks[family]
    code = SEGFAULT if payload == "segfault" else COMPILED_EXIT
    r = run(judge, t, appended(t, code, base=solution_diff(t)))
    assert r.status == "ok" and r.reason is None, (r.reason, r.log)
    assert "candidate_crashed" in r.flags and r.reward == 0.0, (r.flags, r.log[-400:])


def test_a_judge_that_cannot_start_is_a_judge_error_never_the_candidates_zero(
    backend, clamp_task, monkeypatch, tmp_path
):
    """Which is which: with the judge's own runner broken, the same honest diff is a judge_error (retried
    upstream), for a fresh judge (no reference trace yet) and for one that already has it, in its memory
    or in the trace cache another process filled."""
    cache = TraceCache(tmp_path / "traces")
    j = PytestJudge(backend, trace_cache=cache)
    ref = solution_diff(clamp_task)
    assert run(j, clamp_task, ref).reward == 1.0  # healthy: the trace is kept now (memory and cache)
    monkeypatch.setattr(sandbox_runner, "PYTHON", "/nonexistent/python3")
    r = run(j, clamp_task, ref)
    assert r.status == "judge_error" and r.reason == "runner_crashed", (r.reason, r.log)
    fresh = run(PytestJudge(backend, trace_cache=None), clamp_task, ref)
    assert fresh.status == "judge_error" and fresh.reason == "reference_failed", (fresh.reason, fresh.log)
    stored = run(PytestJudge(backend, trace_cache=cache), clamp_task, ref)  # the trace read back from disk
    assert stored.status == "judge_error" and stored.reason == "runner_crashed", (stored.reason, stored.log)


SCAVENGE = """
import os as _os, sys as _sys
_found, _n = [], 0
for _top in ("/judge", "/tmp"):
    for _d, _s, _fs in _os.walk(_top):
        for _f in _fs:
            try:
                _data = open(_os.path.join(_d, _f), "rb").read(1 << 20)
            except OSError:
                continue
            _n += 1
            for _needle in NEEDLES:
                if _needle in _data:
                    _found.append(_needle.decode())
_msg = f"SCANNED {_n} FOUND {sorted(set(_found))}\\n".encode()
__import__("atexit").register(lambda: _os.write(2, _msg))  # after pytest's capture has ended
"""


def test_the_expected_values_are_nowhere_in_the_judges_sandbox(judge, clamp_task):
    """The candidate reads every file it can reach while the judge's tests run; none holds an expected
    value of the hidden tests (they stayed on the host). Positive control: the scan did read files."""
    needles = [b"== -2", b"== 10", b"== 0\n", b"== 5\n"]  # the expected side of each hidden assert
    hidden = (clamp_task.hidden / "test_hidden_clamp.py").read_bytes()
    assert all(n in hidden for n in needles)
    control = b"clamp(0, -9, -2)"  # the input side of an assert: it is in the probes, so the scan finds it
    code = f"NEEDLES = {[*needles, control]!r}\n" + SCAVENGE
    r = run(judge, clamp_task, appended(clamp_task, code, base=solution_diff(clamp_task)))  # short log
    line = next(ln for ln in r.log.splitlines() if ln.startswith("SCANNED"))
    assert int(line.split()[1]) > 3, line
    assert line.endswith(f"FOUND {[control.decode()]!r}"), line


def test_reading_the_coin_from_the_probe_buys_no_pass(judge, dynamic_task):
    """A candidate that reads each truth-value site's polarity from the probe text and records its guess
    instead of what its code computed. Positive control: the same wrong code without the forgery fails
    the truth-value-only test (``test_type_is_int``); with it, it must still fail: the site's skeleton
    (``type(_) is int``) is no longer in the probe, only its leaf, and the host evaluates it."""
    t = dynamic_task
    tid = "test_hidden_clip.py::test_type_is_int"
    wrong = "\ndef clip_sum(xs, lo, hi):\n    return 'wrong'\n"
    honest = run(judge, t, WorkspaceDiff(files={"solution.py": wrong.encode()}))
    assert honest.status == "ok" and honest.per_test[tid] == "failed", honest.per_test
    r = run(judge, t, appended(t, BOOL_POLARITY_FORGERY))
    assert r.status == "ok", r.log
    assert r.per_test["test_hidden_clip.py::test_empty"] != "passed"  # value sites still hold
    assert r.per_test[tid] != "passed", (r.per_test, r.flags)


@pytest.mark.parametrize("family", FAMILIES)
def test_observation_counts_without_values_buy_no_pass(judge, family_tasks, family):
    """Red team: every site claimed observed (a huge count, no value) used to satisfy the count rule while
    leaving nothing to compare, so wrong code passed every test. Each counted observation needs its value."""
    t = family_tasks[family]
    r = run(judge, t, appended(t, COUNT_WITHOUT_VALUES))
    assert r.status == "ok", r.log
    # Positive control: the payload ran (the wrong code ran the tests to their end: pytest saw passes).
    assert re.search(r"\b[1-9]\d* passed\b", r.log), r.log[-600:]
    assert r.reward == 0.0 and r.components["hidden_fraction"] == 0.0, (r.per_test, r.components)


@pytest.mark.parametrize("family", ["clamp", "dynamic"])
def test_text_the_candidate_writes_never_crashes_the_host(judge, family_tasks, family):
    """Red team: report lines nested 200,000 deep and a 5,000-digit observation, written at exit to every
    fd (the launcher's report and the driver's results), raised on the host (RecursionError, ValueError):
    the judgement ended as an unexpected error instead of a verdict. They are malformed lines, nothing more."""
    t = family_tasks[family]
    r = run(judge, t, appended(t, PARSER_BOMB, base=solution_diff(t)))
    assert r.status == "ok", (r.reason, r.log[-400:])
    # Positive control: the bombs arrived (the launcher's stderr got them too) and cost the candidate nothing
    # it had earned: the honest tests still pass.
    assert "]]]]]]]]" in r.log and "observed 7777777777" in r.log, r.log[-400:]
    assert r.components["hidden_fraction"] == 1.0, (r.per_test, r.flags)


def test_a_diff_that_fills_the_agents_disk_is_judged_not_a_judge_error(judge, tmp_path):
    """Red team: a diff as large as the task's disk quota (what an agent that filled its disk leaves) filled
    the judge's sandbox as well; the launcher died writing its probes before ``start`` and the candidate's
    full disk was reported as the judge's fault (judge_error, retried, never penalised)."""
    from sparring.sandbox.storage.workspace import diff_caps
    from sparring.tasks.loader import write_task
    from sparring.tasks.spec import JudgeSpec, Limits, TaskSpec
    from tests_support import BUGGY, FIXED, HIDDEN, HIDDEN_IDS, VISIBLE

    spec = TaskSpec(id="clamp-small-disk", family="code-repair", instruction="Fix clamp.",
                    success_criteria="Hidden tests pass.", judge=JudgeSpec(hidden_tests=HIDDEN_IDS),
                    limits=Limits(disk_mb=64))  # fmt: skip
    t = write_task(tmp_path / "t", spec, workspace={"mathx/__init__.py": "", "mathx/core.py": BUGGY,
                   "tests/test_core.py": VISIBLE}, hidden={"test_hidden_clamp.py": HIDDEN},
                   solution={"mathx/core.py": FIXED})  # fmt: skip
    total, per_file = diff_caps(t.spec.limits.disk_mb)
    files = {"mathx/core.py": FIXED.encode(), "data/a.bin": b"a" * per_file}
    files["data/b.bin"] = b"b" * (total - per_file - 8 * 1024)
    diff = WorkspaceDiff(files=files)
    assert sum(map(len, diff.files.values())) <= total  # positive control: a diff the host accepts
    r = run(judge, t, diff)
    assert r.status == "ok", (r.reason, r.log[-600:])
    assert r.reward == 1.0, (r.per_test, r.flags)
