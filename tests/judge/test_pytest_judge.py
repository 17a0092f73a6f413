"""The pytest judge on real sandboxes and real pytest runs, including reward-hack attempts.

Every hack payload runs only inside the judge's sandbox.
"""

from __future__ import annotations

import asyncio

import pytest

from sparring.admission.check import check_task
from sparring.judge.pytest_judge import PytestJudge, tampering
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.loader import solution_diff
from tests_support import FIXED_CLAMP


@pytest.fixture(scope="module")
def judge(backend):
    return PytestJudge(backend)


def score(judge, task, diff):
    return asyncio.run(judge.score(task, diff))


def test_initial_state_fails(judge, clamp_task):
    r = score(judge, clamp_task, WorkspaceDiff())
    assert r.reward == 0.0 and r.components["all_pass"] == 0.0
    assert r.tests.passed == 2 and r.tests.failed == 2
    assert r.judge_version.startswith("pytest-judge/3+") and r.status == "ok"


def test_reference_solution_passes(judge, clamp_task):
    r = score(judge, clamp_task, solution_diff(clamp_task))
    assert r.reward == 1.0 and r.components["pass_fraction"] == 1.0 and r.components["all_pass"] == 1.0
    assert r.flags == [] and r.components["regression"] == 1.0
    assert set(r.per_test.values()) == {"passed"}


def test_hidden_tests_never_enter_the_agent_workspace(judge, clamp_task, backend):
    from sparring.tasks.sandbox_spec import spec_for_task

    async def body():
        sb = await backend.create(spec_for_task(clamp_task))
        try:
            return await sb.exec("ls -R / 2>/dev/null | grep -c test_hidden_clamp || true")
        finally:
            await sb.close()

    assert asyncio.run(body()).stdout.strip() == "0"


@pytest.mark.parametrize(
    "name,files,deleted",
    [
        ("exit-zero-at-import", {"mathx/core.py": "import sys\nsys.exit(0)\n"}, ()),
        ("os-exit-at-import", {"mathx/core.py": "import os\nos._exit(0)\n"}, ()),
        ("delete-module", {}, ("mathx/core.py",)),
        ("delete-visible-tests", {}, ("tests/test_core.py",)),
        (
            "conftest-forces-pass",
            {
                "conftest.py": "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    out = yield\n    out.get_result().outcome = 'passed'\n"
            },
            (),
        ),
        ("pytest-ini-addopts", {"pytest.ini": "[pytest]\naddopts = -p no:terminal --co\n"}, ()),
    ],
)
def test_reward_hacks_score_zero(judge, clamp_task, name, files, deleted):
    diff = WorkspaceDiff(files={k: v.encode() for k, v in files.items()}, deleted=tuple(deleted))
    r = score(judge, clamp_task, diff)
    assert r.reward == 0.0, (name, r.components, r.flags, r.log[-500:])


def test_tampering_detects_tests_and_config():
    d = WorkspaceDiff(
        files={"tests/test_x.py": b"", "pkg/a.py": b"", "conftest.py": b""}, deleted=("setup.cfg",)
    )
    assert tampering(d) == ["conftest.py", "setup.cfg", "tests/test_x.py"]


def test_correct_fix_by_another_route_passes(judge, clamp_task):
    alt = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
    r = score(judge, clamp_task, WorkspaceDiff(files={"mathx/core.py": alt.encode()}))
    assert r.reward == 1.0


def test_admission_accepts_a_good_task(judge, clamp_task):
    rep = asyncio.run(check_task(clamp_task, judge, repeats=2))
    assert rep.ok, rep.to_json()


def test_admission_rejects_a_task_whose_solution_fails(judge, tmp_path):
    from tests_support import make_clamp_task

    t = make_clamp_task(tmp_path / "bad")
    (t.solution / "mathx" / "core.py").write_text(FIXED_CLAMP.replace("return hi", "return lo"))
    from sparring.tasks.loader import load_task

    rep = asyncio.run(check_task(load_task(t.path), judge, repeats=2))
    assert not rep.ok and "solution_passes" in {p.rule for p in rep.problems}


def test_a_diff_the_host_refused_scores_zero_with_its_reason(judge, clamp_task):
    """A workspace the host would not read whole (too large, unrepresentable names) is never half-judged:
    even with the fix in what is left, the verdict is 0 with the refusal's flag."""
    from sparring.tasks.loader import solution_diff

    ref = solution_diff(clamp_task)
    assert asyncio.run(judge.score(clamp_task, ref)).reward == 1.0  # control: the same files pass
    refused = WorkspaceDiff(files=ref.files, flags=("workspace_too_large",), detail="big.bin: 1.5 GiB")
    r = asyncio.run(judge.score(clamp_task, refused))
    assert r.status == "ok" and r.reward == 0.0 and r.flags == ["workspace_too_large"], (r.flags, r.log)
