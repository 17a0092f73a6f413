"""The shell-look family (look before acting): deterministic, balanced tasks that the judge admits,
whose file only `ls` reveals; and its demonstrator, whose looking episodes take three turns and pass,
and whose guessing habit runs at the configured rate and passes one time in three."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from look_support import demonstrator_rollouts

from sparring.admission.check import check_tasks
from sparring.errors import ConfigError
from sparring.judge.pytest_judge import PytestJudge
from sparring.monitor.skill import look_skill
from sparring.policy.look_demonstrator import LookDemonstrator
from sparring.rollout.scheduler import RolloutSummary
from sparring.sandbox.local.backend import LocalBackend
from sparring.tasks.families import INSPECTIONS, generate
from sparring.tasks.families.shell_look import NAMES, OPS, apply_op, is_inspection, shell_look_task, task_file


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), start=st.integers(0, 100))
def test_every_twelve_consecutive_tasks_cover_every_operation_and_name(seed: int, start: int) -> None:
    pairs = {tuple(shell_look_task(i, seed)[0].tags[1:]) for i in range(start, start + 12)}
    assert pairs == {(f"op:{o}", f"file:{n}") for o in OPS for n in NAMES}


def test_the_workspace_holds_one_file_the_ticket_does_not_name() -> None:
    for i in range(12):
        spec, ws, _hidden, sol = shell_look_task(i, 4)
        (name,) = ws
        assert spec.tags[2] == f"file:{name}" and name in NAMES
        assert not any(n in spec.instruction for n in NAMES)
        lines = str(ws[name]).split()
        op = spec.tags[1][3:]
        assert str(sol["out.txt"]).split() == apply_op(op, lines)
        assert all(apply_op(o, lines) != apply_op(op, lines) for o in OPS if o != op)


def test_same_seed_same_bytes_other_seed_other_tasks(tmp_path: Path) -> None:
    a = generate("shell-look", 8, 5, tmp_path / "a")
    b = generate("shell-look", 8, 5, tmp_path / "b")
    c = generate("shell-look", 8, 6, tmp_path / "c")
    assert [t.digest for t in a] == [t.digest for t in b]
    assert len({t.digest for t in a}) == 8
    assert {t.digest for t in a}.isdisjoint(t.digest for t in c)


def test_generated_tasks_are_admitted(tmp_path: Path) -> None:
    tasks = generate("shell-look", 3, 5, tmp_path / "t")
    reports = asyncio.run(check_tasks(tasks, PytestJudge(LocalBackend()), repeats=3))
    assert all(r.ok for r in reports), [r.to_json() for r in reports if not r.ok]


def test_inspection_is_ls_or_list_dir_and_nothing_that_acts() -> None:
    assert INSPECTIONS["shell-look"] is is_inspection
    assert is_inspection("bash", {"command": "ls"}) and is_inspection(
        "bash", {"command": "ls -la /workspace"}
    )
    assert is_inspection("list_dir", {}) and is_inspection("list_dir", None)
    for tool, args in (("bash", {"command": "sort notes.txt > out.txt"}), ("bash", {"command": "lsof"}),
                       ("bash", {"command": ""}), ("bash", {}), ("bash", None), ("submit", {})):  # fmt: skip
        assert not is_inspection(tool, args), (tool, args)


def test_demonstrator_guesses_at_its_rate_and_otherwise_looks_first(tmp_path: Path) -> None:
    tasks = generate("shell-look", 24, 1, tmp_path / "t")
    for guess, lo, hi in ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.7, 0.6, 0.8)):
        pol = LookDemonstrator(guess, seed=2)
        habit: collections.Counter[bool] = collections.Counter()
        names: collections.Counter[str] = collections.Counter()
        for t in tasks:
            for s in range(8):
                plan = pol.plan(t, s, 0)
                op = OPS[t.spec.tags[1][3:]]
                if len(plan) == 1:  # a guess: the operation on some name, no look
                    assert plan[0] in {op.command(n) for n in NAMES}
                    names[plan[0]] += 1
                else:
                    assert plan == ["ls", op.command(task_file(t))]
                habit[len(plan) == 1] += 1
        rate = habit[True] / sum(habit.values())
        assert lo <= rate <= hi, (guess, rate)
    with pytest.raises(ConfigError, match="guess"):
        LookDemonstrator(1.5)


@pytest.fixture(scope="module")
def demo_rollouts(tmp_path_factory: pytest.TempPathFactory) -> RolloutSummary:
    """The demonstrator (guess=0.5) through the real sandbox, tools and judge: 6 tasks x 4 samples."""
    return demonstrator_rollouts(tmp_path_factory.mktemp("look"), "shell-look", 6, 2, 4, max_steps=3)


def test_demonstrator_looks_then_acts_on_what_ls_showed_in_three_turns(demo_rollouts: RolloutSummary) -> None:
    looked = [
        t
        for t in demo_rollouts.trajectories
        if t.steps and is_inspection(t.steps[0].name, t.steps[0].arguments)
    ]
    guessed = [t for t in demo_rollouts.trajectories if t not in looked]
    assert looked and guessed and all(t.status == "ok" for t in demo_rollouts.trajectories)
    for t in looked:
        assert len(t.steps) == 3 and [s.name for s in t.steps] == ["bash", "bash", "submit"]
        shown = t.steps[0].output.splitlines()  # "[exit 0]", then the one file's name
        assert shown[0] == "[exit 0]" and shown[1:] == [task_file_of(t.task_id, demo_rollouts)]
        assert shown[1] in t.steps[1].arguments["command"]  # type: ignore[index]
        assert t.passed
    for t in guessed:
        assert len(t.steps) == 2 and [s.name for s in t.steps] == ["bash", "submit"]
    # a guess is right exactly when it named the task's file
    for t in guessed:
        assert t.passed == (task_file_of(t.task_id, demo_rollouts) in t.steps[0].arguments["command"])  # type: ignore[index]
    skill = look_skill(demo_rollouts.trajectories, is_inspection)
    assert skill["inspect_first"] == len(looked) / 24 and skill["pass_if_inspect"] == 1.0
    assert skill["pass_if_not"] is not None and skill["pass_if_not"] < 1.0


def task_file_of(task_id: str, summary: RolloutSummary) -> str:
    """The file name of a task of the fixture, from its index (task ids end in -INDEX-op)."""
    index = int(task_id.split("-")[-2])
    return shell_look_task(index, 2)[0].tags[2].removeprefix("file:")
