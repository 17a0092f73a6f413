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

from sparring.admission.check import (
    REFERENCE_RUNS,
    CheckReport,
    check_hidden_tests,
    check_initial_state,
    check_instruction,
    check_original_not_reachable,
    check_task,
)
from sparring.admission.flake import runs_to_catch
from sparring.judge.pytest_judge import PytestJudge
from sparring.tasks import attacks
from sparring.tasks.loader import ADMISSION_FILE, Task, load_admission, load_task, write_task
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


def run_check(task: Task, judge: PytestJudge, repeats: int | None = 2) -> CheckReport:
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


def test_a_missing_or_empty_solution_dir_is_named_not_a_failing_reference(judge, tmp_path: Path) -> None:
    import shutil

    t = make_clamp_task(tmp_path / "t")
    shutil.rmtree(t.solution)
    rep = run_check(t, judge)
    assert (
        [p.detail for p in rep.problems if p.rule == "solution_passes"]
        == [p.detail for p in rep.problems if "solution/ is missing" in p.detail]
        != []
    )
    assert not any("fails" in p.detail for p in rep.problems), rep.to_json()
    t.solution.mkdir()
    rep = run_check(t, judge)
    assert any("solution/ is empty" in p.detail for p in rep.problems), rep.to_json()


def test_hidden_test_already_passing_is_rejected(judge, tmp_path: Path) -> None:
    passing = [i for i in HIDDEN_IDS if i.endswith(("test_inside", "test_below"))]
    t = clamp_variant(tmp_path / "t", hidden_ids=passing)
    rep = run_check(t, judge)
    assert "initial_state_fails" in rules(rep)


# A test that passes half the time: a fresh coin on every run (os.urandom inside the judge's sandbox).
COIN = "\n\ndef test_coin():\n    import os\n    assert os.urandom(1)[0] < 128\n"
# Runs that catch a half-time test with probability 1 - 1e-6 (20), so these tests themselves are not
# flaky: each admission misses the coin with probability 2 * 0.5^22 (20 reference + 2 initial runs).
STRICT_RUNS = runs_to_catch(1 - 1e-6, 0.5)
ADMISSIONS = 3


def test_unlisted_hidden_test_file_is_rejected_every_time_by_name(judge, tmp_path: Path) -> None:
    t = clamp_variant(tmp_path / "t", extra_hidden={"test_extra.py": "import os" + COIN})
    for _ in range(ADMISSIONS):
        rep = run_check(t, judge, repeats=None)  # the library default: the flake target's runs
        assert rules(rep) == {"hidden_tests_listed"}, rep.to_json()
        assert "hidden/test_extra.py runs unlisted" in rep.problems[0].detail
        assert rep.outcomes == {}  # decided from the files: the coin never ran, so it cannot decide


@pytest.mark.parametrize(
    ("files", "ids", "named"),
    [
        ({"deep/er/coin_test.py": COIN}, None, "hidden/deep/er/coin_test.py runs unlisted"),
        ({"eval/test_coin.py": COIN}, None, "hidden/eval/test_coin.py never runs"),
        (
            {"eval/test_coin.py": COIN, "eval/test_ok.py": "def test_ok():\n    assert True\n",
             "eval/expected_tests.txt": "test_ok.py::test_ok\n"},
            None,
            "hidden/eval/test_coin.py runs unlisted: list its tests in hidden/eval/expected_tests.txt",
        ),
        ({}, [*HIDDEN_IDS, "test_hidden_clamp.py::test_gone"], "test_hidden_clamp.py defines no test_gone"),
        ({}, [*HIDDEN_IDS, "test_nowhere.py::test_x"], "test_nowhere.py::test_x: no file test_nowhere.py"),
        (
            {"eval/test_ok.py": "def test_ok():\n    assert True\n",
             "eval/expected_tests.txt": "test_ok.py::test_ok\ntest_ok.py::test_gone\n"},
            None,
            "expected_tests.txt lists test_ok.py::test_gone: test_ok.py defines no test_gone",
        ),
    ],
)  # fmt: skip
def test_every_collected_hidden_test_file_is_listed_and_every_listed_id_exists(
    tmp_path: Path, files: dict[str, str | bytes], ids: list[str] | None, named: str
) -> None:
    t = clamp_variant(tmp_path / "t", extra_hidden=files, hidden_ids=ids)
    problems = check_hidden_tests(load_task(t.path))
    assert [p.rule for p in problems] == ["hidden_tests_listed"], problems
    assert named in problems[0].detail


def test_admission_assets_and_listed_files_need_no_listing(tmp_path: Path) -> None:
    t = clamp_variant(
        tmp_path / "t",
        hidden_ids=[*HIDDEN_IDS, "sub/test_more.py::TestMore::test_case[1]"],
        extra_hidden={
            ".admission/alternatives/a/tests/test_alt.py": COIN,  # admission assets: never collected
            "sub/test_more.py": "import pytest\n\n\nclass TestMore:\n"
            "    @pytest.mark.parametrize('x', [1])\n    def test_case(self, x):\n        assert x\n",
            "eval/expected_tests.txt": "test_e.py::test_e\n",
            "eval/test_e.py": "def test_e():\n    assert True\n",
            "helpers.py": "X = 1\n",  # not a test file
        },
    )
    assert check_hidden_tests(load_task(t.path)) == []


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "unlisted_in_a_listed_file"])
def test_flaky_hidden_test_is_rejected_every_time_as_flaky_by_its_id(
    judge, tmp_path: Path, listed: bool
) -> None:
    coin_id = "test_hidden_clamp.py::test_coin"
    ids = [*HIDDEN_IDS, coin_id] if listed else None
    t = clamp_variant(tmp_path / "t", hidden=HIDDEN + COIN, hidden_ids=ids)
    for _ in range(ADMISSIONS):
        rep = run_check(t, judge, repeats=STRICT_RUNS)
        # The cause, and only the cause: not judge_deterministic, regression_kept or solution_passes.
        assert rules(rep) == {"solution_flaky"}, rep.to_json()
        (p,) = [p for p in rep.problems if "reference solution" in p.detail]
        assert p.detail.startswith(f"hidden test {coin_id} passed ")
        passes = int(p.detail.split(" passed ")[1].split(" of ")[0])
        assert 0 < passes < STRICT_RUNS and f"of {STRICT_RUNS} runs" in p.detail  # the coin really ran


def test_flaky_test_of_the_evaluation_split_is_caught_on_the_reference(judge, tmp_path: Path) -> None:
    t = clamp_variant(
        tmp_path / "t",
        extra_hidden={"eval/test_coin.py": COIN, "eval/expected_tests.txt": "test_coin.py::test_coin\n"},
    )
    rep = run_check(t, judge, repeats=STRICT_RUNS)
    assert rules(rep) == {"solution_flaky"}, rep.to_json()
    assert rep.problems[0].detail.startswith("hidden test eval/test_coin.py::test_coin passed ")


def test_good_task_is_admitted_with_the_flake_targets_runs(judge, tmp_path: Path) -> None:
    t = clamp_variant(
        tmp_path / "t",
        extra_hidden={"eval/test_e.py": "def test_e():\n    assert True\n",
                      "eval/expected_tests.txt": "test_e.py::test_e\n"},
    )  # fmt: skip
    rep = run_check(t, judge, repeats=None)
    assert rep.ok, rep.to_json()
    assert rep.outcomes["reference"]["runs"] == REFERENCE_RUNS == 10


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
    r = subprocess.run([*EXE, "tasks", "check", str(t.path), "--json", "--repeats", "1"],
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
    diff = attacks.hardcode(load_task(t.path))
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
