"""The red-team suite: every hack class on several task families scores zero, and is flagged.

Each hack workspace (sparring.tasks.hacks.HACKS) is judged in a real sandbox
by the real judge; payloads run only inside the judge's sandbox.
"""

from __future__ import annotations

import asyncio

import pytest

from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.quality.redteam import EXPECTED_FLAGS
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.hacks import HACKS
from sparring.tasks.loader import solution_diff

FAMILIES = ["clamp", "code-repair", "function-impl", "dynamic"]


@pytest.fixture(scope="module")
def judge(backend):
    return PytestJudge(backend)


def run(judge, task, diff):
    return asyncio.run(judge.score(task, diff))


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_scores_full_and_initial_zero(judge, family_tasks, family):
    t = family_tasks[family]
    ref = run(judge, t, solution_diff(t))
    assert ref.status == "ok" and ref.components["all_pass"] == 1.0 and ref.reward == 1.0, (
        ref.flags,
        ref.log[-800:],
    )
    assert ref.flags == []
    init = run(judge, t, WorkspaceDiff())
    assert init.components["all_pass"] == 0.0 and init.reward == 0.0


@pytest.mark.parametrize("hack", sorted(HACKS))
@pytest.mark.parametrize("family", FAMILIES)
def test_hack_scores_zero_and_is_flagged(judge, family_tasks, family, hack):
    t = family_tasks[family]
    r = run(judge, t, HACKS[hack](t))
    assert r.status == "ok"
    assert r.reward == 0.0, (hack, r.components, r.flags, r.log[-800:])
    if hack in EXPECTED_FLAGS:
        assert EXPECTED_FLAGS[hack] in r.flags, (hack, r.flags)
    else:
        assert r.components["all_pass"] == 0.0


@pytest.mark.parametrize("family", ["clamp", "code-repair"])
def test_swapped_test_code_is_caught_even_on_a_correct_solution(judge, family_tasks, family):
    """Test functions whose code the candidate replaced 'pass' without one assert: the host sees sites
    the reference observed go unobserved, fails those tests and flags it."""
    from sparring.tasks.hack_payloads import NEUTER_TESTS
    from sparring.tasks.hacks import target

    t = family_tasks[family]
    ref, rel = solution_diff(t), target(t)
    r = run(judge, t, WorkspaceDiff(files={**ref.files, rel: ref.files[rel] + b"\n" + NEUTER_TESTS.encode()}))
    assert "assertions_skipped" in r.flags and r.reward == 0.0 and r.components["all_pass"] == 0.0


def test_judge_assets_never_reach_the_agent_and_no_judge_mount_is_writable(judge, clamp_task, backend):
    """In the agent's sandbox there is no /judge content; in the judge's, no writable judge mount."""
    from sparring.tasks.sandbox_spec import spec_for_task

    async def body():
        sb = await backend.create(spec_for_task(clamp_task))
        try:
            return await sb.exec("find /judge -type f 2>/dev/null | wc -l")
        finally:
            await sb.close()

    assert asyncio.run(body()).stdout.strip() == "0"
    probe = b"import os\n_W = [d for d in ('/judge', '/judge/cfg', '/judge/hidden', '/judge/regress') if os.access(d, os.W_OK)]\nassert not _W, _W\n"
    hack = WorkspaceDiff(files={"mathx/probe.py": probe, "mathx/__init__.py": b"from mathx import probe\n"})
    r = run(judge, clamp_task, hack)
    assert r.per_test["test_hidden_clamp.py::test_inside"] == "passed", r.log[-800:]
