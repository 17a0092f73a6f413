"""`sparring tasks new` writes an admitted example; `sparring tasks pin` re-pins the workspace digest (issue 35)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sparring.admission.check import check_initial_state
from sparring.tasks.loader import load_task, workspace_digest
from sparring.tasks.pin import pin_task, pinned_text

EXE = Path(sys.executable).parent / "sparring"


def sp(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *map(str, args)], capture_output=True, text=True, timeout=600)


def test_pin_after_an_edit_names_the_change_and_admission_names_the_command(tmp_path):
    r = sp("tasks", "new", tmp_path / "t", "--json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    task = load_task(tmp_path / "t")
    assert made["workspace_digest"] == task.spec.workspace_digest == workspace_digest(task.workspace)
    assert check_initial_state(task) == []
    src = tmp_path / "t" / "workspace" / "wordcount" / "__init__.py"
    src.write_text(src.read_text() + "# edited\n")
    problems = check_initial_state(load_task(tmp_path / "t"))
    assert [p.rule for p in problems] == ["initial_state_reproducible"]
    assert f"sparring tasks pin {task.path}" in problems[0].detail
    r = sp("tasks", "pin", tmp_path / "t", "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)["tasks"]
    assert row["changed"] is True and row["previous"] == made["workspace_digest"]
    assert row["workspace_digest"] == workspace_digest(task.workspace) != made["workspace_digest"]
    assert check_initial_state(load_task(tmp_path / "t")) == []
    again = json.loads(sp("tasks", "pin", tmp_path / "t", "--json").stdout)["tasks"][0]
    assert again["changed"] is False


def test_pin_keeps_comments_and_adds_a_missing_pin_before_the_first_table(tmp_path):
    d = tmp_path / "hand"
    (d / "workspace").mkdir(parents=True)
    (d / "workspace" / "a.py").write_text("x = 1\n")
    text = (
        '# my task\nid = "hand"\nfamily = "mine"  # a note\n\n[judge]\nhidden_tests = ["test_h.py::test_a"]\n'
    )
    (d / "task.toml").write_text(text)
    p = pin_task(d)
    assert p.changed and p.previous is None
    out = (d / "task.toml").read_text()
    assert out.startswith("# my task\n") and "# a note" in out
    assert tomllib.loads(out)["workspace_digest"] == p.workspace_digest
    assert tomllib.loads(out)["judge"]["hidden_tests"] == ["test_h.py::test_a"]
    assert pinned_text(out, "sha256:" + "0" * 64).count("workspace_digest") == 1


def test_missing_pin_is_rejected_with_the_command(tmp_path):
    d = tmp_path / "hand"
    (d / "workspace").mkdir(parents=True)
    (d / "task.toml").write_text('id = "hand"\nfamily = "mine"\n')
    (problem,) = check_initial_state(load_task(d))
    assert problem.rule == "initial_state_reproducible" and "sparring tasks pin" in problem.detail


def test_new_refuses_a_non_empty_directory_and_pin_a_broken_task(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    r = sp("tasks", "new", tmp_path / "full")
    assert (
        r.returncode != 0 and "not an empty directory" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    )
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "task.toml").write_text('id = "bad"\n')
    r = sp("tasks", "pin", tmp_path / "bad")
    assert r.returncode != 0 and "family" in r.stderr


@pytest.mark.slow
def test_new_task_is_admitted_as_written(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_ADMISSION_CACHE", str(tmp_path / "cache"))
    assert sp("tasks", "new", tmp_path / "ex").returncode == 0
    r = sp("tasks", "check", tmp_path / "ex", "--json", "--repeats", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["tasks"][0]["ok"] is True
