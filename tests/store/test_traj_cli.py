"""`sparring traj search|show|export` through a real typer app over a real store file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from sparring.cli.traj import app as traj_app
from sparring.store.sqlite import SQLiteStore
from sparring.trajectory import ToolStep, Trajectory

SEARCH_ITEM_KEYS = {
    "id",
    "task_id",
    "status",
    "reward",
    "flags",
    "attempts",
    "policy",
    "family",
    "created_at",
}


def _cli() -> typer.Typer:
    root = typer.Typer()
    root.add_typer(traj_app, name="traj")
    return root


def _traj(i: int, **kw: Any) -> Trajectory:
    fields: dict[str, Any] = dict(
        id=f"t{i}",
        task_id=f"task-{i % 2}",
        task_digest="d" * 64,
        family="code-repair",
        policy="oracle",
        status="ok",
        reward=i / 4,
        components={"all_pass": 1.0 if i % 2 else 0.0},
        created_at=1_700_000_000.0 + i,
        messages=[
            {"role": "user", "content": f"Please fix issue {i}"},
            {
                "role": "assistant",
                "content": "Running the tests first.",
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {"name": "run_tests", "arguments": '{"args": "-q"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c0", "content": "short view"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
                ],
            },
        ],
        steps=[
            ToolStep(
                index=0,
                tool_call_id="c0",
                name="run_tests",
                exit_code=1,
                output="HEAD-OF-OUTPUT " + "x" * 5000 + " TAIL-OF-OUTPUT",
            )
        ],
        diff={"files": {"calc.py": {"text": "a\nb\n"}, "blob.bin": {"b64": "AAE="}}, "deleted": ["old.py"]},
    )
    fields.update(kw)
    return Trajectory(**fields)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "runs" / "store.db"
    with SQLiteStore(path) as s:
        for i in range(4):
            s.put(_traj(i))
        s.put(_traj(9, status="timeout", flags=["test_tampering"], reward=0.0, policy="random"))
    return path


def invoke(*args: str):
    return CliRunner().invoke(_cli(), ["traj", *args])


def one_line_error(result) -> str:
    assert result.exit_code != 0
    assert result.stdout == ""
    err = result.stderr.strip()
    assert err.startswith("error:") and "\n" not in err, err
    assert "Traceback" not in result.output
    return err


def test_search_json_shape(store_path: Path) -> None:
    r = invoke("search", "--store", str(store_path), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["total"] == 5
    assert [t["id"] for t in doc["trajectories"]] == ["t9", "t3", "t2", "t1", "t0"]  # newest first
    for t in doc["trajectories"]:
        assert set(t) == SEARCH_ITEM_KEYS
    assert doc["trajectories"][0] == {
        "id": "t9",
        "task_id": "task-1",
        "status": "timeout",
        "reward": 0.0,
        "flags": ["test_tampering"],
        "attempts": 1,
        "policy": "random",
        "family": "code-repair",
        "created_at": 1_700_000_009.0,
    }


@pytest.mark.parametrize(
    ("args", "ids"),
    [
        (["--task", "task-0"], ["t2", "t0"]),
        (["--status", "timeout"], ["t9"]),
        (["--family", "nope"], []),
        (["--policy", "oracle", "--min-reward", "0.5"], ["t3", "t2"]),
        (["--max-reward", "0.25"], ["t9", "t1", "t0"]),
        (["--flag", "test_tampering"], ["t9"]),
        (["--text", "fix issue 2"], ["t2"]),
        (["--text", "tail-of-output", "--limit", "2"], ["t9", "t3"]),
    ],
)
def test_search_filters(store_path: Path, args: list[str], ids: list[str]) -> None:
    r = invoke("search", "--store", str(store_path), *args, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [t["id"] for t in doc["trajectories"]] == ids
    if "--limit" in args:
        assert doc["total"] == 5


def test_search_table(store_path: Path) -> None:
    r = invoke("search", "--store", str(store_path))
    assert r.exit_code == 0, r.output
    assert "5 of 5 trajectories" in r.stdout
    assert "t9" in r.stdout and "test_tam" in r.stdout and "timeout" in r.stdout


def test_show_renders_turns_calls_outputs_and_diff(store_path: Path) -> None:
    r = invoke("show", "t1", "--store", str(store_path))
    assert r.exit_code == 0, r.output
    out = r.stdout
    for needle in (
        "trajectory t1",
        "task-1",
        "status    ok",
        "all_pass=1.000",
        "Please fix issue 1",
        "turn 1",
        "Running the tests first.",
        'run_tests({"args": "-q"})',
        "HEAD-OF-OUTPUT",
        "more chars",
        "exit 1",
        "turn 2",
        "submit({})",
        "2 file(s) written, 1 deleted",
        "W calc.py (2 lines)",
        "W blob.bin (binary)",
        "D old.py",
    ):
        assert needle in out, needle
    assert "TAIL-OF-OUTPUT" not in out  # tool outputs are clipped for display
    assert "short view" not in out  # the full step output replaces the truncated observation


def test_show_json_dumps_the_record(store_path: Path) -> None:
    r = invoke("show", "t9", "--store", str(store_path), "--json")
    assert r.exit_code == 0, r.output
    assert Trajectory.model_validate(json.loads(r.stdout)) == _traj(
        9, status="timeout", flags=["test_tampering"], reward=0.0, policy="random"
    )


def test_show_unknown_id_is_one_line_error(store_path: Path) -> None:
    err = one_line_error(invoke("show", "zzz", "--store", str(store_path)))
    assert "no trajectory zzz" in err


def test_export_jsonl(store_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    r = invoke("export", "--store", str(store_path), "--out", str(out), "--status", "ok", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"written": 4, "path": str(out)}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {row["id"] for row in rows} == {"t0", "t1", "t2", "t3"}
    assert next(row for row in rows if row["id"] == "t2")["messages"] == _traj(2).messages


@pytest.mark.parametrize("command", ["search", "show", "export"])
def test_missing_store_is_one_line_error_and_creates_nothing(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nowhere" / "store.db"
    args = {
        "search": ["search"],
        "show": ["show", "t1"],
        "export": ["export", "--out", str(tmp_path / "o.jsonl")],
    }[command]
    err = one_line_error(invoke(*args, "--store", str(missing), "--json"))
    assert "no trajectory store" in err
    assert list(tmp_path.iterdir()) == []


def test_non_store_file_is_one_line_error_and_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("not a database\n" * 50)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    err = one_line_error(invoke("search", "--store", str(path), "--json"))
    assert "not a Sparring trajectory store" in err
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["search", "--status", "great"], "unknown --status"),
        (["search", "--limit", "-1"], "--limit"),
        (["export", "--out", "x.csv", "--format", "csv"], "unknown --format"),
    ],
)
def test_bad_input_is_one_line_error(store_path: Path, args: list[str], needle: str) -> None:
    err = one_line_error(invoke(*args, "--store", str(store_path)))
    assert needle in err
