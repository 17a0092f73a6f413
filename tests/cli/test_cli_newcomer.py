"""The rough edges a newcomer met (issue 35), each through the real `sparring` executable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.cli.summary import summary_rows

EXE = Path(sys.executable).parent / "sparring"


def sp(*args, timeout=300, cwd=None):
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"}
    return subprocess.run(
        [str(EXE), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def one_line_error(r) -> str:
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    return lines[0]


def no_python_dict(text: str) -> None:
    assert "{'" not in text and "': " not in text, text


@pytest.fixture(scope="module")
def store(clamp_task, tmp_path_factory) -> Path:
    """A store of two oracle rollouts (their ids differ from the first character on, most likely)."""
    s = tmp_path_factory.mktemp("newcomer") / "s.db"
    r = sp("rollout", "--tasks", clamp_task.path, "--policy", "oracle", "--group-size", "2", "--store", s)
    assert r.returncode == 0, r.stderr
    no_python_dict(r.stdout)  # a readable table, not a dict
    assert "run_id" in r.stdout and "statuses.ok" in r.stdout and "2" in r.stdout
    return s


def test_summary_rows_flatten_nested_records():
    rows = dict(
        summary_rows({"a": 1.23456, "s": {"ok": 2}, "l": [1, 2], "r": [{"x": 1}], "n": None, "b": True})
    )
    assert rows == {
        "a": "1.235",
        "s.ok": "2",
        "l": "1, 2",
        "r": "1 item(s)",
        "r[0]": "x=1",
        "n": "-",
        "b": "yes",
    }


def test_traj_show_takes_a_unique_prefix(store):
    ids = [
        t["id"] for t in json.loads(sp("traj", "search", "--json", "--store", store).stdout)["trajectories"]
    ]
    assert len(ids) == 2
    # the shortest prefix that tells them apart, and the 12 characters the HTML index shows
    n = next(i for i in range(1, 40) if ids[0][:i] != ids[1][:i])
    for prefix in (ids[0][:n], ids[0][:12]):
        r = sp("traj", "show", prefix, "--store", store, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["id"] == ids[0]
    assert "no trajectory" in one_line_error(sp("traj", "show", "zz-none", "--store", store))


def test_an_ambiguous_prefix_says_how_many_match(tmp_path):
    from sparring.store.sqlite import SQLiteStore
    from sparring.trajectory import Trajectory

    s = tmp_path / "s.db"
    with SQLiteStore(s) as st:
        st.put_many([Trajectory(id=f"t00{i}", run_id="r", task_id="a", task_digest="d" * 64, policy="oracle",
                                status="ok", reward=1.0, messages=[]) for i in range(3)])  # fmt: skip
    err = one_line_error(sp("traj", "show", "t00", "--store", s))
    assert "ambiguous" in err and "3 trajectories" in err
    assert json.loads(sp("traj", "show", "t002", "--store", s, "--json").stdout)["id"] == "t002"


def test_traj_view_out_a_file_is_a_one_line_error(store, tmp_path):
    f = tmp_path / "page.html"
    f.write_text("mine\n")
    err = one_line_error(sp("traj", "view", "--store", store, "--out", f))
    assert "is a file" in err and "Not a directory" not in err
    assert f.read_text() == "mine\n"


def test_review_collect_prints_a_table(store, tmp_path):
    r = sp("review", "collect", "--store", store, "--db", tmp_path / "q.db")
    assert r.returncode == 0, r.stderr
    no_python_dict(r.stdout)
    assert "scanned" in r.stdout


def test_judge_score_prints_a_table(clamp_task, tmp_path):
    r = sp("judge", "score", "--task", clamp_task.path, "--workspace", clamp_task.workspace)
    assert r.returncode == 0, r.stderr
    no_python_dict(r.stdout)
    assert "components." in r.stdout and "2 passed, 2 failed" in r.stdout


def test_tasks_generate_help_lists_every_family():
    from sparring.cli.tasks import FAMILY_NAMES
    from sparring.tasks.families import FAMILIES

    assert FAMILY_NAMES.split(", ") == sorted(FAMILIES)
    r = sp("tasks", "generate", "--help", cwd=None)
    flat = " ".join(r.stdout.split()).replace("│", "").replace("  ", " ")
    assert all(f in flat for f in FAMILIES), r.stdout
