"""`judge batch` as library functions: diff selection, option checks, review keys, the summary.

The judging itself (real sandboxes) is covered by tests/judge/test_cli_judge.py and
tests/judge/test_review_canary.py through the CLI; these pin down the decisions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparring.errors import ConfigError
from sparring.judge.quality.canary import make_canary
from sparring.judge.runner.batch import BatchSource, batch_summary, review_key
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.hacks import HACKS
from sparring.tasks.loader import solution_diff


def test_the_source_picks_one_diff_per_task(clamp_task, tmp_path: Path) -> None:
    assert BatchSource().diff_for(clamp_task) == WorkspaceDiff()
    assert BatchSource(reference=True).diff_for(clamp_task) == solution_diff(clamp_task)
    assert BatchSource(hack="delete_tests").diff_for(clamp_task) == HACKS["delete_tests"](clamp_task)
    ws = tmp_path / "ws"
    (ws / clamp_task.id).mkdir(parents=True)
    (ws / clamp_task.id / "new.txt").write_text("x")
    got = BatchSource(workspaces=ws).diff_for(clamp_task)
    assert got.files.get("new.txt") == b"x"
    # no directory for the task: judged as its initial state
    assert BatchSource(workspaces=tmp_path / "empty").diff_for(clamp_task) == WorkspaceDiff()


def test_a_canary_gets_the_diff_of_the_task_it_was_made_from(clamp_task, tmp_path: Path) -> None:
    canary = make_canary(clamp_task, tmp_path / "c")
    assert canary.id == f"{clamp_task.id}-canary"
    ws = tmp_path / "ws"
    (ws / clamp_task.id).mkdir(parents=True)
    (ws / clamp_task.id / "new.txt").write_text("y")
    assert BatchSource(workspaces=ws).diff_for(canary).files.get("new.txt") == b"y"


@pytest.mark.parametrize(
    ("source", "concurrency", "message"),
    [
        (BatchSource(), 0, "--concurrency must be at least 1"),
        (BatchSource(reference=True, hack="delete_tests"), 1, "at most one of"),
        (BatchSource(workspaces=Path("."), reference=True), 1, "at most one of"),
        (BatchSource(hack="no_such_hack"), 1, "unknown hack class 'no_such_hack'"),
        (BatchSource(workspaces=Path("/nonexistent-sparring-dir")), 1, "is not a directory"),
    ],
)
def test_bad_options_are_one_line_config_errors(source: BatchSource, concurrency: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        source.check(concurrency)


def test_good_options_pass() -> None:
    BatchSource(hack="delete_tests").check(4)
    BatchSource(workspaces=Path(".")).check(1)


def _result(task_id: str, *, canary: bool = False, status: str = "ok", reward: float = 0.0,
            all_pass: float = 0.0, flags: list[str] | None = None) -> dict:  # fmt: skip
    return {"task_id": task_id, "canary": canary, "status": status, "reason": None, "reward": reward,
            "components": {"all_pass": all_pass}, "flags": flags or [], "judge_version": "j/1",
            "dynamic_seed": 3, "log": "..."}  # fmt: skip


def test_the_summary_keeps_canaries_apart() -> None:
    results = [
        _result("a", reward=1.0, all_pass=1.0),
        _result("b", reward=0.5, flags=["exit_trick"]),
        _result("c", status="judge_error"),
        _result("a-canary", canary=True, reward=1.0, all_pass=1.0),
        _result("b-canary", canary=True),
    ]
    s = batch_summary(results, "j/1", queued=2, seconds=2.0)
    assert s["judged"] == 5 and s["statuses"] == {"ok": 4, "judge_error": 1}
    assert s["reward_mean"] == pytest.approx(0.5) and s["pass_rate"] == pytest.approx(1 / 3)
    assert (s["flagged"], s["canaries"], s["hack_rate"]) == (1, 2, 0.5)
    assert (s["queued_for_review"], s["seconds"], s["per_minute"]) == (2, 2.0, 150.0)
    assert s["results"][0] == {"task_id": "a", "canary": False, "status": "ok", "reason": None, "reward": 1.0,
                               "flags": []}  # fmt: skip


def test_an_empty_batch_summarises_to_zeros() -> None:
    s = batch_summary([], "j/1", queued=0, seconds=0.0)
    assert (s["judged"], s["reward_mean"], s["pass_rate"], s["per_minute"], s["canaries"]) == (
        0,
        0.0,
        0.0,
        0.0,
        0,
    )


def test_review_keys_name_the_judgement_and_differ_per_run() -> None:
    r = _result("a")
    assert review_key(r, 7) == "batch:a:j/1:3:7"
    assert review_key(r, 7) != review_key(r, 8)
