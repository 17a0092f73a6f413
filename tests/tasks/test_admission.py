"""Admission: broken tasks are rejected, each by the rule it breaks; a good task is admitted.

Every task here is a variant of the clamp task (tests_support), judged by the
real pytest judge in real sandboxes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.judge.pytest_judge import PytestJudge
from sparring.tasks import hacks
from sparring.tasks.check import (
    ADMISSION_FILE,
    CheckReport,
    check_initial_state,
    check_instruction,
    check_original_not_reachable,
    check_task,
    load_admission,
)
from sparring.tasks.loader import Task, load_task, write_task
from sparring.tasks.spec import JudgeSpec, TaskSpec
from tests_support import BUGGY, FIXED, HIDDEN, HIDDEN_IDS, VISIBLE, make_clamp_task

EXE = [sys.executable, "-m", "sparring.cli.main"]


@pytest.fixture(scope="module")
def judge(backend):  # type: ignore[no-untyped-def]
    return PytestJudge(backend)


def clamp_variant(
    out: Path,
    *,
    hidden: str = HIDDEN,
    hidden_ids: list[str] | None = None,
    solution: str = FIXED,
    workspace_extra: dict[str, str | bytes] | None = None,
    extra_hidden: dict[str, str | bytes] | None = None,
    weights: dict[str, float] | None = None,
    success: str = "All hidden tests of mathx.core.clamp pass.",
) -> Task:
    spec = TaskSpec(
        id="clamp-variant",
        family="code-repair",
        instruction="The function clamp in mathx/core.py returns the wrong value for inputs above the range. "
        "Fix the bug without editing the tests.",
        success_criteria=success,
        judge=JudgeSpec(hidden_tests=hidden_ids or HIDDEN_IDS, weights=weights or {"all_pass": 1.0}),
    )
    ws: dict[str, str | bytes] = {
        "mathx/__init__.py": "",
        "mathx/core.py": BUGGY,
        "tests/test_core.py": VISIBLE,
    }
    return write_task(
        out,
        spec,
        workspace={**ws, **(workspace_extra or {})},
        hidden={"test_hidden_clamp.py": hidden, **(extra_hidden or {})},
        solution={"mathx/core.py": solution},
    )


def rules(rep: CheckReport) -> set[str]:
    return {p.rule for p in rep.problems}


def run_check(task: Task, judge: PytestJudge, repeats: int = 2) -> CheckReport:
    return asyncio.run(check_task(load_task(task.path), judge, repeats=repeats))


def test_good_task_is_admitted_with_outcomes(judge, tmp_path: Path) -> None:
    rep = run_check(make_clamp_task(tmp_path / "t"), judge, repeats=5)
    assert rep.ok, rep.to_json()
    assert rep.outcomes["reference"]["runs"] == 5
    assert rep.outcomes["initial"]["per_test"]["test_hidden_clamp.py::test_above"] == "failed"
    assert set(rep.outcomes["reference"]["per_test"].values()) == {"passed"}


def test_failing_reference_is_rejected(judge, tmp_path: Path) -> None:
    t = clamp_variant(
        tmp_path / "t", solution=BUGGY.replace("return lo\n    return x", "return x\n    return x")
    )
    assert "solution_passes" in rules(run_check(t, judge))


def test_hidden_test_already_passing_is_rejected(judge, tmp_path: Path) -> None:
    passing = [i for i in HIDDEN_IDS if i.endswith(("test_inside", "test_below"))]
    t = clamp_variant(tmp_path / "t", hidden_ids=passing)
    rep = run_check(t, judge)
    assert "initial_state_fails" in rules(rep)


def test_flaky_test_is_rejected(judge, tmp_path: Path) -> None:
    flaky = HIDDEN + "\n\ndef test_flaky():\n    import os\n    assert os.urandom(1)[0] < 128\n"
    t = clamp_variant(
        tmp_path / "t", hidden=flaky, hidden_ids=[*HIDDEN_IDS, "test_hidden_clamp.py::test_flaky"]
    )
    # P(ten runs all agree) = 2 / 1024: the reference is seen both passing and failing.
    rep = run_check(t, judge, repeats=10)
    assert "solution_flaky" in rules(rep), rep.to_json()


@pytest.mark.parametrize("text", ["", "   ", "TODO", "passes"])
def test_missing_or_vague_success_criteria_is_rejected(tmp_path: Path, text: str) -> None:
    t = clamp_variant(tmp_path / "t", success=text)
    assert {p.rule for p in check_instruction(load_task(t.path))} == {"success_criteria_specific"}


def test_missing_success_criteria_rejected_through_the_cli(tmp_path: Path) -> None:
    t = clamp_variant(tmp_path / "t", success="")
    toml = (t.path / "task.toml").read_text()
    (t.path / "task.toml").write_text(
        "\n".join(ln for ln in toml.splitlines() if not ln.startswith("success_criteria"))
    )
    r = subprocess.run([*EXE, "tasks", "check", str(t.path), "--json", "--environment", "host", "--repeats", "1"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 1, r.stderr
    (item,) = json.loads(r.stdout)["tasks"]
    assert not item["ok"] and "success_criteria_specific" in {p["rule"] for p in item["problems"]}


def test_tampered_workspace_is_rejected(judge, tmp_path: Path) -> None:
    t = make_clamp_task(tmp_path / "t")
    assert check_initial_state(t) == []
    (t.workspace / "mathx" / "core.py").write_text(FIXED)  # someone "fixed" the initial state after writing
    tampered = load_task(t.path)
    assert [p.rule for p in check_initial_state(tampered)] == ["initial_state_reproducible"]
    rep = run_check(tampered, judge, repeats=1)
    assert "initial_state_reproducible" in rules(rep)


def test_regression_of_an_unlisted_test_is_rejected(judge, tmp_path: Path) -> None:
    # test_inside_again passes on the initial state; the reference breaks it, though every *listed* test passes.
    hidden = HIDDEN + "\n\ndef test_inside_again():\n    assert clamp(5, 0, 10) == 5\n"
    broken = FIXED.replace("    return x\n", "    return x if x != 5 else -1\n")
    ids = [i for i in HIDDEN_IDS if not i.endswith("test_inside")]
    t = clamp_variant(tmp_path / "t", hidden=hidden, hidden_ids=ids, solution=broken)
    assert rules(run_check(t, judge)) == {"regression_kept"}


def test_noop_hack_with_partial_credit_is_rejected(judge, tmp_path: Path) -> None:
    t = clamp_variant(tmp_path / "t", weights={"pass_fraction": 1.0})
    assert "hack_noop_scores_zero" in rules(run_check(t, judge, repeats=1))


def test_hardcoding_the_visible_examples_is_rejected_when_they_are_all_the_tests(
    judge, tmp_path: Path
) -> None:
    hidden = VISIBLE
    ids = ["test_hidden_clamp.py::test_inside", "test_hidden_clamp.py::test_above"]
    t = clamp_variant(tmp_path / "t", hidden=hidden, hidden_ids=ids)
    diff = hacks.hardcode(load_task(t.path))
    assert diff is not None and "_examples" in diff.files["mathx/core.py"].decode()
    assert "hack_hardcode_scores_zero" in rules(run_check(t, judge, repeats=1))


def test_rejected_alternative_makes_the_task_ambiguous(judge, tmp_path: Path) -> None:
    style = (
        HIDDEN
        + "\n\ndef test_style():\n    import inspect\n    assert 'return hi' in inspect.getsource(clamp)\n"
    )
    alt = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
    t = clamp_variant(
        tmp_path / "t",
        hidden=style,
        hidden_ids=[*HIDDEN_IDS, "test_hidden_clamp.py::test_style"],
        extra_hidden={".admission/alternatives/minmax/mathx/core.py": alt},
    )
    assert rules(run_check(t, judge, repeats=1)) == {"alternative_passes"}


def test_shipped_alternative_that_passes_is_fine(judge, tmp_path: Path) -> None:
    alt = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
    t = clamp_variant(tmp_path / "t", extra_hidden={".admission/alternatives/minmax/mathx/core.py": alt})
    assert run_check(t, judge, repeats=1).ok


def test_original_left_in_the_workspace_is_rejected(tmp_path: Path) -> None:
    t = clamp_variant(tmp_path / "t", workspace_extra={"mathx/core.py.orig": FIXED})
    assert [p.rule for p in check_original_not_reachable(t)] == ["original_not_reachable"]
    t2 = clamp_variant(tmp_path / "t2", workspace_extra={".git/HEAD": "ref: refs/heads/main\n"})
    assert [p.rule for p in check_original_not_reachable(t2)] == ["original_not_reachable"]
    env = frozenset({__import__("hashlib").sha256(FIXED.encode()).hexdigest()})
    t3 = make_clamp_task(tmp_path / "t3")
    assert [p.rule for p in check_original_not_reachable(t3, env)] == ["original_not_reachable"]
    assert check_original_not_reachable(t3) == []


def test_cli_stores_admission_with_the_task_version(tmp_path: Path) -> None:
    t = make_clamp_task(tmp_path / "t")
    env = {**os.environ, "SPARRING_ENV_CACHE": str(tmp_path.parent / "envs")}
    r = subprocess.run([*EXE, "tasks", "check", str(t.path), "--json", "--repeats", "5"],
                       capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    rec = load_admission(t)
    assert rec is not None and rec["ok"] and rec["digest"] == t.digest and rec["version"] == 1
    assert rec["environment"].startswith("sha256:") and rec["repeats"] == 5
    # A changed task no longer matches its stored result.
    (t.hidden / "test_hidden_clamp.py").write_text(HIDDEN + "\n")
    assert load_admission(load_task(t.path)) is None
    assert (t.path / ADMISSION_FILE).is_file()
