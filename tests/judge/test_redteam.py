"""The red-team suite: every hack class on several task families scores zero, and is flagged.

Each hack workspace (sparring.judge.redteam.HACKS) is judged in a real sandbox
by the real judge; payloads run only inside the judge's sandbox.
"""

from __future__ import annotations

import asyncio

import pytest

from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.redteam import EXPECTED_FLAGS, HACKS
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.check import solution_diff

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
