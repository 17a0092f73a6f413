"""`sparring tasks family-bench`: per-family distinct and admitted counts (real generators, real judge)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.admission.family_bench import run_family_admission, spread_sample

SPARRING = Path(sys.executable).parent / "sparring"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SPARRING), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})  # fmt: skip


def test_generate_only_counts_one_json_line_per_family() -> None:
    r = _cli(
        "tasks",
        "family-bench",
        "--families",
        "shell-ops,function-impl",
        "--n",
        "40",
        "--admit",
        "0",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["family"] for row in rows] == ["shell-ops", "function-impl"]
    for row in rows:
        assert row["generated"] == row["distinct"] == 40 and row["checked"] == row["admitted"] == 0, row
        assert row["seconds_per_task"] is None and row["rejected_by_rule"] == {}
    # function-impl's 40 tasks are 40 different functions; shell-ops has eight operations on random data
    assert rows[1]["distinct_instructions"] == 40 and rows[0]["distinct_instructions"] <= 8


def test_without_json_a_table() -> None:
    r = _cli("tasks", "family-bench", "--families", "shell-ops", "--n", "5", "--admit", "0")
    assert r.returncode == 0, r.stderr
    assert "{" not in r.stdout and "distinct" in r.stdout and "shell-ops" in r.stdout


def test_unknown_family_is_a_one_line_error() -> None:
    r = _cli("tasks", "family-bench", "--families", "shell-ops,nope", "--n", "3")
    assert r.returncode != 0 and r.stdout == ""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unknown family 'nope'" in lines[0], r.stderr


@pytest.mark.slow
def test_admission_on_a_sample_reports_yield_and_cost(backend) -> None:  # type: ignore[no-untyped-def]
    row = asyncio.run(
        run_family_admission(backend, "shell-ops", n=6, seed=1, admit=2, repeats=2)
    )  # tasks 0 and 3
    assert row["generated"] == row["distinct"] == 6 and row["checked"] == 2
    assert row["admitted"] == 2 and row["rejected"] == 0, row
    assert row["seconds_per_task"] > 0 and row["projected_admission_s_all"] >= row["seconds_per_task"] * 6 - 1
    assert row["repeats"] == 2


@pytest.mark.slow
def test_cli_admission_shows_progress_on_stderr_and_json_on_stdout() -> None:
    r = _cli("tasks", "family-bench", "--families", "shell-ops", "--n", "4", "--seed", "1", "--admit", "2",
             "--repeats", "2", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert row["checked"] == row["admitted"] == 2, row
    # stderr is a pipe here: the bar prints as whole lines (start, end), never escape codes
    assert "shell-ops: generating 4 tasks, then checking 2" in r.stderr
    assert "shell-ops: admission: 0/2" in r.stderr and "shell-ops: admission: 2/2 done in" in r.stderr
    assert "\x1b[" not in r.stderr


def test_a_sample_is_spread_over_the_tasks_without_repeats() -> None:
    assert spread_sample(list(range(200)), 5) == [0, 40, 80, 120, 160]
    assert spread_sample([1, 2], 5) == [1, 2] and spread_sample([1], 0) == [] and spread_sample([], 3) == []


def test_n_past_one_seed_spans_consecutive_seeds(backend) -> None:  # type: ignore[no-untyped-def]
    row = asyncio.run(run_family_admission(backend, "shell-ops", n=5, seed=3, admit=0, per_seed=2))
    assert row["generated"] == 5 and row["seeds"] == 3 and row["checked"] == 0
    one = asyncio.run(run_family_admission(backend, "shell-ops", n=2, seed=4, admit=0))
    assert one["seeds"] == 1 and one["generated"] == 2
