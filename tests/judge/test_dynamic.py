"""Dynamic tests: fresh seeded inputs, repeats, shuffled order, exact types, reference vs candidate."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparring.judge.dynamic.inputs import DynamicSpec, compare, make_inputs
from sparring.judge.inside.judge_driver import Unserialisable, encode
from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.sandbox.base import WorkspaceDiff

SPEC = DynamicSpec(
    module="m", function="f", args=[{"int": [-5, 5]}, {"list": {"of": {"str": {"max": 3}}, "max": 3}}]
)

# Passes every fixed hidden test by a table of their inputs (as if it had read them), else guesses.
SPECIAL_CASED = b"""\
def clip_sum(xs, lo, hi):
    table = {((), 0, 5): 0, ((-3, 2, 9), 0, 5): 7, ((1, 2), 0, 5): 3, ((1,), 0, 5): 1}
    return table.get((tuple(xs), lo, hi), 0)
"""
# Right on the first call of each input, wrong afterwards: caught by repeated inputs.
CALL_COUNTING = b"""\
_seen = set()


def clip_sum(xs, lo, hi):
    key = (tuple(xs), lo, hi)
    r = sum(min(max(x, lo), hi) for x in xs)
    if key in _seen:
        return r + 1
    _seen.add(key)
    return r
"""
# An int subclass that equals anything: fools `==` in-process, not the exact-typed comparison.
SNEAKY_INT = b"""\
class _I(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__


def clip_sum(xs, lo, hi):
    return _I(0)
"""
FLOAT_RESULT = b"""\
def clip_sum(xs, lo, hi):
    return float(sum(min(max(x, lo), hi) for x in xs))
"""


def test_inputs_are_a_pure_function_of_the_seed_and_repeat_each_case():
    a, b = make_inputs(SPEC, 7), make_inputs(SPEC, 7)
    assert a == b and make_inputs(SPEC, 8) != a
    assert len(a) == SPEC.cases * SPEC.repeat
    keys = [repr(x) for x in a]
    assert all(keys.count(k) >= SPEC.repeat for k in keys)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.tuples(c, c),
        max_leaves=8,
    )
)
def test_encode_is_injective_on_types(x):
    assert encode(x) == encode(x)
    if isinstance(x, bool):  # compared as JSON text on the host, where False and 0 differ
        assert json.dumps(encode(x)) != json.dumps(encode(int(x)))


def test_encode_rejects_lookalikes():
    class Sub(int):
        pass

    with pytest.raises(Unserialisable):
        encode(Sub(3))
    assert encode(1) != encode(1.0) and encode((1,)) != encode([1])
    assert json.dumps(encode(True)) != json.dumps(encode(1))


def test_compare_counts_mismatches():
    ref = [{"ok": 1}, {"ok": 2}, {"raised": "ValueError"}]
    assert compare(ref, ref) == (1.0, 0)
    assert compare(ref, [{"ok": 1}, {"ok": 3}, {"raised": "ValueError"}])[1] == 1
    assert compare(ref, None) == (0.0, 3)


@pytest.fixture(scope="module")
def judge(backend):
    return PytestJudge(backend, config=JudgeConfig(dynamic_seed=11, shuffle_seed=3))


@pytest.mark.parametrize("name,code", [("special-cased", SPECIAL_CASED), ("call-counting", CALL_COUNTING),
                                       ("sneaky-int", SNEAKY_INT), ("float-result", FLOAT_RESULT)])  # fmt: skip
def test_generated_tests_catch_what_fixed_tests_miss(judge, dynamic_task, name, code):
    r = asyncio.run(judge.score(dynamic_task, WorkspaceDiff(files={"solution.py": code})))
    assert r.status == "ok" and r.components["dynamic"] < 1.0 and r.components["all_pass"] == 0.0, (
        name,
        r.components,
    )
    assert r.reward == 0.0 and r.metrics["dynamic_mismatches"] > 0


def test_special_cased_solution_passes_the_fixed_hidden_tests(judge, dynamic_task):
    r = asyncio.run(judge.score(dynamic_task, WorkspaceDiff(files={"solution.py": SPECIAL_CASED})))
    assert r.components["hidden_all_pass"] == 1.0 and r.components["all_pass"] == 0.0


def test_fresh_seed_each_evaluation_unless_pinned(backend, dynamic_task):
    j = PytestJudge(backend)
    seeds = {asyncio.run(j.score(dynamic_task, WorkspaceDiff())).dynamic_seed for _ in range(2)}
    assert len(seeds) == 2


def test_eval_judge_runs_only_the_eval_split(backend, dynamic_task):
    from sparring.tasks.loader import solution_diff

    train, ev = PytestJudge(backend), PytestJudge(backend, config=JudgeConfig(split="eval"))
    assert train.version != ev.version
    r = asyncio.run(ev.score(dynamic_task, solution_diff(dynamic_task)))
    assert r.per_test == {"test_eval_clip.py::test_eval_negative": "passed"} and r.reward == 1.0
    assert "dynamic" not in r.components
    t = asyncio.run(train.score(dynamic_task, solution_diff(dynamic_task)))
    assert not any("eval" in k for k in t.per_test) and len(t.per_test) == 3
