"""The admission gate (issue 33): generate admits what it writes; rollout and eval refuse unadmitted tasks
with one line (--allow-unadmitted overrides); verdicts are cached by digest and judge version."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.admission.gate import admission_judge_version, lookup, verdicts
from sparring.tasks.loader import ADMISSION_FILE, load_task
from sparring.tasks.template import new_task

EXE = Path(sys.executable).parent / "sparring"


def sp(*args: object, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_ALLOW_UNADMITTED"}
    env["SPARRING_ADMISSION_CACHE"] = str(cache)
    return subprocess.run([str(EXE), *map(str, args)], capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture
def no_override(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARRING_ALLOW_UNADMITTED", raising=False)
    monkeypatch.setenv("SPARRING_ADMISSION_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_rollout_refuses_a_never_checked_task_and_the_flag_overrides(no_override, tmp_path):
    t = new_task(tmp_path / "tasks" / "wc")
    r = sp(
        "rollout",
        "--tasks",
        tmp_path / "tasks",
        "--policy",
        "oracle",
        "--store",
        tmp_path / "s.db",
        cache=no_override,
    )
    assert r.returncode != 0 and not (tmp_path / "s.db").exists()
    assert (
        "never admitted" in r.stderr
        and "sparring tasks check" in r.stderr
        and "--allow-unadmitted" in r.stderr
    )
    assert len(r.stderr.strip().splitlines()) == 1
    r = sp(
        "eval",
        "--tasks",
        tmp_path / "tasks",
        "--policy",
        "oracle",
        "--store",
        tmp_path / "e.db",
        cache=no_override,
    )
    assert r.returncode != 0 and "never admitted" in r.stderr
    r = sp("rollout", "--tasks", t.path, "--policy", "oracle", "--store", tmp_path / "s.db", "--json",
           "--allow-unadmitted", cache=no_override)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["reward_mean"] == 1.0


def test_rollout_refuses_a_rejected_task_naming_the_rule(no_override, tmp_path):
    t = new_task(tmp_path / "tasks" / "wc")
    rec = {"digest": t.digest, "ok": False, "judge_version": admission_judge_version(),
           "problems": [{"rule": "solution_passes", "detail": "the reference solution fails ['x']"}]}  # fmt: skip
    (t.path / ADMISSION_FILE).write_text(json.dumps(rec))
    r = sp(
        "rollout", "--tasks", t.path, "--policy", "oracle", "--store", tmp_path / "s.db", cache=no_override
    )
    assert r.returncode != 0 and "not admitted (solution_passes" in r.stderr
    rec["judge_version"] = "pytest-judge/0+old"
    (t.path / ADMISSION_FILE).write_text(json.dumps(rec))
    (v,) = verdicts([load_task(t.path)])
    assert v.ok is None and "checked by judge pytest-judge/0+old, not by the current one" in v.line()


@pytest.mark.slow
def test_check_then_rollout_uses_the_verdict_and_the_cache_serves_a_copy(no_override, tmp_path):
    t = new_task(tmp_path / "tasks" / "wc")
    r = sp("tasks", "check", t.path, "--json", "--repeats", "2", cache=no_override)
    assert r.returncode == 0, r.stderr
    assert lookup(load_task(t.path), admission_judge_version())["ok"] is True
    r = sp(
        "rollout",
        "--tasks",
        t.path,
        "--policy",
        "oracle",
        "--store",
        tmp_path / "s.db",
        "--json",
        cache=no_override,
    )
    assert r.returncode == 0, r.stderr
    # a copy without admission.json: same bytes, same judge -> the cached verdict admits it
    shutil.copytree(t.path, tmp_path / "copy" / "wc", ignore=shutil.ignore_patterns(ADMISSION_FILE))
    (v,) = verdicts([load_task(tmp_path / "copy" / "wc")])
    assert v.ok is True
    # an edited (and re-pinned) copy is another task: no verdict
    f = tmp_path / "copy" / "wc" / "hidden" / "test_hidden_wordcount.py"
    f.write_text(f.read_text() + "\n")
    (v,) = verdicts([load_task(tmp_path / "copy" / "wc")])
    assert v.ok is None


@pytest.mark.slow
def test_generate_marks_every_task_it_writes(no_override, tmp_path):
    r = sp("tasks", "generate", "shell-ops", "--n", "2", "--seed", "0", "--out", tmp_path / "g", "--json",
           cache=no_override)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["tasks"]
    assert [row["admitted"] for row in rows] == [True, True]
    for row in rows:
        rec = json.loads((Path(row["path"]) / ADMISSION_FILE).read_text())
        assert (
            rec["ok"] and rec["digest"] == row["digest"] and rec["judge_version"] == admission_judge_version()
        )
    r = sp("tasks", "generate", "shell-ops", "--n", "1", "--seed", "0", "--out", tmp_path / "h", "--no-check",
           "--json", cache=no_override)  # fmt: skip
    assert json.loads(r.stdout)["tasks"][0]["admitted"] is None


def test_a_judge_fault_on_one_task_is_its_result_and_never_a_cached_verdict(backend, no_override, tmp_path):
    """Seen measuring reject rates on a loaded machine: a spreadsheet task's reference run timed out, the
    judge raised, and the whole batch's check died with it."""
    import asyncio

    from sparring.admission.check import JUDGE_FAULT, check_tasks, record_result
    from sparring.judge.pytest_judge import PytestJudge
    from sparring.tasks.loader import write_task
    from sparring.tasks.spec import JudgeSpec, TaskSpec

    spec = TaskSpec(id="slow", family="mine", instruction="Make slow.value return 2 instead of 1; leave the tests alone.",
                    success_criteria="The hidden test of slow.value passes.",
                    judge=JudgeSpec(hidden_tests=["test_hidden_slow.py::test_value"], timeout_s=1.0))  # fmt: skip
    hidden = "import time\nfrom slow import value\n\n\ndef test_value():\n    time.sleep(5)\n    assert value() == 2\n"
    slow = write_task(tmp_path / "slow", spec, workspace={"slow.py": "def value():\n    return 1\n"},
                      hidden={"test_hidden_slow.py": hidden}, solution={"slow.py": "def value():\n    return 2\n"})  # fmt: skip
    good = new_task(tmp_path / "wc")
    reps = asyncio.run(check_tasks([slow, good], PytestJudge(backend), repeats=2))
    by_id = {r.id: r for r in reps}
    assert by_id["slow"].rules == [JUDGE_FAULT] and "reference" in by_id["slow"].problems[0].detail
    assert by_id["wc"].ok
    record_result(slow, by_id["slow"], 2, admission_judge_version())
    (v,) = verdicts([load_task(slow.path)])
    assert v.ok is None  # checked again next time, not refused for good
