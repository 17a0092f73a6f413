"""The judge's trace of the reference solution is the reference's, never the initial state's.

Found with `sparring tasks generate code-repair --n 12 --seed 21` (issue 33): the probes' reference run of
a family without dynamic tests ran on the initial state, so a test failing there had no reference trace,
and a value the host cannot compare (an object, observed by ``assert k not in cache``) failed the
reference solution itself: admission rejected the task under ``solution_passes``.
"""

from __future__ import annotations

import asyncio

from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.loader import solution_diff, write_task
from sparring.tasks.spec import JudgeSpec, TaskSpec

BUGGY = '''\
class Box:
    """A set of keys with a capacity; the oldest key leaves when full."""

    def __init__(self, capacity=2):
        self.capacity = capacity
        self.keys = []

    def __contains__(self, key):
        return key in self.keys

    def add(self, key):
        self.keys.append(key)
        if len(self.keys) > self.capacity:
            self.keys.pop(len(self.keys))  # IndexError: the test stops before it observes the box
'''
FIXED = BUGGY.replace("self.keys.pop(len(self.keys))", "self.keys.pop(0)")
HIDDEN = """\
from box import Box


def test_oldest_leaves():
    b = Box()
    for k in (1, 2, 3):
        b.add(k)
    assert len(b.keys) == 2
    assert b.keys[0] == 2
    assert 1 not in b
"""


def test_reference_passes_a_test_that_observes_an_object(backend, tmp_path):
    spec = TaskSpec(
        id="box-bug",
        family="code-repair",
        instruction="Box.add in box.py evicts the wrong key when the box is full. Fix it; leave the tests alone.",
        success_criteria="The hidden test of box.Box passes.",
        judge=JudgeSpec(hidden_tests=["test_hidden_box.py::test_oldest_leaves"]),
    )
    task = write_task(tmp_path / "box", spec, workspace={"box.py": BUGGY}, hidden={"test_hidden_box.py": HIDDEN},
                      solution={"box.py": FIXED})  # fmt: skip

    async def go() -> tuple[float, float]:
        judge = PytestJudge(backend)
        initial = await judge.score(task, WorkspaceDiff())
        ref = await judge.score(task, solution_diff(task))
        return initial.reward, ref.reward

    initial, reference = asyncio.run(go())
    assert initial == 0.0  # the test raises on the initial state before it observes the box
    assert reference == 1.0
