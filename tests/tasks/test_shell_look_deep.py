"""The shell-look-deep family (two looks before acting, issue 37's harder variant): deterministic tasks
that cover every (operation, folder, file) triple once per 36, whose folder only `ls` and whose file
only `ls FOLDER` reveal, admitted by the judge; and the demonstrator on them through real sandboxes:
its looking episodes take four turns and pass, its guesses pass when both names were right."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from look_support import demonstrator_rollouts

from sparring.admission.check import check_tasks
from sparring.judge.pytest_judge import PytestJudge
from sparring.monitor.skill import look_skill
from sparring.policy.look_demonstrator import LookDemonstrator
from sparring.rollout.scheduler import RolloutSummary
from sparring.sandbox.local.backend import LocalBackend
from sparring.tasks.families import INSPECTIONS, generate
from sparring.tasks.families.shell_look import NAMES, OPS, apply_op, is_inspection, task_dir, task_file
from sparring.tasks.families.shell_look_deep import CYCLE, DIRS, shell_look_deep_task


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), start=st.integers(0, 100))
def test_every_cycle_of_consecutive_tasks_covers_every_triple_once(seed: int, start: int) -> None:
    triples = [tuple(shell_look_deep_task(i, seed)[0].tags[1:3]) for i in range(start, start + CYCLE)]
    assert CYCLE == 36 and len(set(triples)) == CYCLE
    assert set(triples) == {(f"op:{o}", f"file:{d}/{n}") for o in OPS for d in DIRS for n in NAMES}


def test_the_workspace_holds_one_folder_with_one_file_the_ticket_does_not_name() -> None:
    for i in range(CYCLE):
        spec, ws, _hidden, sol = shell_look_deep_task(i, 4)
        (path,) = ws
        folder, name = path.split("/")
        assert folder in DIRS and name in NAMES
        assert spec.tags[2:] == [f"file:{path}", f"dir:{folder}"]
        assert not any(w in spec.instruction for w in (*DIRS, *NAMES))
        op = spec.tags[1][3:]
        assert str(sol["out.txt"]).split() == apply_op(op, str(ws[path]).split())


def test_generated_tasks_are_admitted(tmp_path: Path) -> None:
    tasks = generate("shell-look-deep", 3, 5, tmp_path / "t")
    reports = asyncio.run(check_tasks(tasks, PytestJudge(LocalBackend()), repeats=3))
    assert all(r.ok for r in reports), [r.to_json() for r in reports if not r.ok]


def test_the_demonstrator_looks_twice_or_guesses_both_names(tmp_path: Path) -> None:
    assert INSPECTIONS["shell-look-deep"] is is_inspection
    tasks = generate("shell-look-deep", 12, 1, tmp_path / "t")
    pol, guesses = LookDemonstrator(0.5, seed=2), 0
    for t in tasks:
        op, folder = OPS[t.spec.tags[1][3:]], task_dir(t)
        assert folder is not None and task_file(t).startswith(folder + "/")
        for s in range(8):
            plan = pol.plan(t, s, 0)
            if len(plan) == 1:
                guesses += 1
                assert plan[0] in {op.command(f"{d}/{n}") for d in DIRS for n in NAMES}
            else:
                assert plan == ["ls", f"ls {folder}", op.command(task_file(t))]
    assert 0.35 <= guesses / 96 <= 0.65


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory: pytest.TempPathFactory) -> RolloutSummary:
    """The demonstrator (guess=0.5) through the real sandbox, tools and judge: 4 tasks x 4 samples."""
    return demonstrator_rollouts(tmp_path_factory.mktemp("deep"), "shell-look-deep", 4, 2, 4, max_steps=4)


def test_two_looks_show_the_folder_then_the_file_and_the_act_on_both_passes(rollouts: RolloutSummary) -> None:
    looked = [
        t for t in rollouts.trajectories if t.steps and is_inspection(t.steps[0].name, t.steps[0].arguments)
    ]
    guessed = [t for t in rollouts.trajectories if t not in looked]
    assert looked and guessed and all(t.status == "ok" for t in rollouts.trajectories)
    for t in looked:
        path = _file_of(t.task_id)
        folder, name = path.split("/")
        assert [s.name for s in t.steps] == ["bash", "bash", "bash", "submit"]
        assert t.steps[0].output.splitlines() == ["[exit 0]", folder]  # ls: the folder alone
        assert t.steps[1].output.splitlines() == ["[exit 0]", name]  # ls FOLDER: the file alone
        assert path in t.steps[2].arguments["command"]  # type: ignore[index]
        assert t.passed
    for t in guessed:
        assert [s.name for s in t.steps] == ["bash", "submit"]
        assert t.passed == (_file_of(t.task_id) in t.steps[0].arguments["command"])  # type: ignore[index]
    skill = look_skill(rollouts.trajectories, is_inspection)
    assert skill["pass_if_inspect"] == 1.0 and skill["pass_if_not"] is not None and skill["pass_if_not"] < 1.0


def _file_of(task_id: str) -> str:
    """FOLDER/NAME of a task of the fixture, from its index (task ids end in -INDEX-op)."""
    return shell_look_deep_task(int(task_id.split("-")[-2]), 2)[0].tags[2].removeprefix("file:")
