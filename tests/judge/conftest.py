"""Tasks of several families for the judge's tests (fixtures only; nothing here is imported)."""

from __future__ import annotations

import json

import pytest

from sparring.tasks.families import generate
from sparring.tasks.loader import Task, write_task
from sparring.tasks.spec import JudgeSpec, TaskSpec

CLIP_SUM = '''\
def clip_sum(xs, lo, hi):
    """Sum of the values of xs, each first clamped into [lo, hi]."""
    raise NotImplementedError
'''
CLIP_SUM_REF = '''\
def clip_sum(xs, lo, hi):
    """Sum of the values of xs, each first clamped into [lo, hi]."""
    return sum(min(max(x, lo), hi) for x in xs)
'''
CLIP_HIDDEN = """\
from solution import clip_sum


def test_empty():
    assert clip_sum([], 0, 5) == 0


def test_mixed():
    assert clip_sum([-3, 2, 9], 0, 5) == 7


def test_type_is_int():
    assert type(clip_sum([1, 2], 0, 5)) is int
"""
CLIP_VISIBLE = "from solution import clip_sum\n\n\ndef test_one():\n    assert clip_sum([1], 0, 5) == 1\n"
DYNAMIC = {
    "module": "solution",
    "function": "clip_sum",
    "cases": 30,
    "repeat": 2,
    "args": [{"list": {"of": {"int": [-20, 20]}, "max": 6}}, {"int": [-10, 0]}, {"int": [0, 10]}],
}
CLIP_IDS = [f"test_hidden_clip.py::{n}" for n in ("test_empty", "test_mixed", "test_type_is_int")]
EVAL_HIDDEN = (
    "from solution import clip_sum\n\n\ndef test_eval_negative():\n    assert clip_sum([-9], -4, 4) == -4\n"
)


def make_dynamic_task(out) -> Task:
    spec = TaskSpec(
        id="clip-sum",
        family="function-impl",
        instruction="Implement clip_sum in solution.py as its docstring describes. Do not edit the tests.",
        success_criteria="Hidden and generated tests of clip_sum pass.",
        judge=JudgeSpec(hidden_tests=CLIP_IDS, timeout_s=60),
    )
    return write_task(
        out,
        spec,
        workspace={"solution.py": CLIP_SUM, "tests/test_visible.py": CLIP_VISIBLE},
        hidden={
            "test_hidden_clip.py": CLIP_HIDDEN,
            "dynamic.json": json.dumps(DYNAMIC),
            "eval/test_eval_clip.py": EVAL_HIDDEN,
            "eval/expected_tests.txt": "test_eval_clip.py::test_eval_negative\n",
        },
        solution={"solution.py": CLIP_SUM_REF},
    )


@pytest.fixture(scope="session")
def dynamic_task(tmp_path_factory) -> Task:
    return make_dynamic_task(tmp_path_factory.mktemp("dyn") / "clip-sum")


@pytest.fixture(scope="session")
def family_tasks(tmp_path_factory, clamp_task, dynamic_task) -> dict[str, Task]:
    """One task per family: hand-written code repair, generated code repair, generated function-impl, dynamic."""
    base = tmp_path_factory.mktemp("families")
    cr = generate("code-repair", 1, 3, base / "cr")[0]
    fi = generate("function-impl", 1, 3, base / "fi")[0]
    return {"clamp": clamp_task, "code-repair": cr, "function-impl": fi, "dynamic": dynamic_task}
