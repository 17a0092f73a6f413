"""Type-aware mutation of seed inputs: types, domains and sizes kept, a pure function of the rng."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.errors import TaskError
from sparring.judge.dynamic.inputs import DynamicSpec, compare, load_dynamic, make_inputs, usable_cases
from sparring.judge.dynamic.mutation import MAX_LEN, infer_domain, mutate
from sparring.judge.inside.judge_driver import decode_args, encode
from sparring.tasks.dynamic_format import NotInputData, to_input

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda c: (
        st.lists(c, max_size=5)
        | st.lists(c, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=3) | st.integers(-5, 5), c, max_size=3)
    ),
    max_leaves=12,
)


def _scalars(x: Any, out: list[Any]) -> list[Any]:
    if isinstance(x, (list, tuple)):
        for v in x:
            _scalars(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _scalars(v, out)
    else:
        out.append(x)
    return out


def _seqs(x: Any, out: list[Any]) -> list[Any]:
    if isinstance(x, (list, tuple)):
        out.append(x)
        for v in x:
            _seqs(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _seqs(v, out)
    return out


def _typed(x: Any) -> str:
    return json.dumps(encode(x), sort_keys=True)


def _draws(seeds: list[Any], seed: int, n: int = 30) -> list[Any]:
    rng = random.Random(seed)
    enc = [to_input(s) for s in seeds]
    return [decode_args(mutate(enc, rng)) for _ in range(n)]


@settings(max_examples=150, deadline=None)
@given(VALUES)
def test_to_input_round_trips_with_exact_types(x):
    back = decode_args(json.loads(json.dumps(to_input(x))))
    assert _typed(back) == _typed(x)


@settings(max_examples=150, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=4), st.integers(0, 2**31))
def test_mutation_keeps_types_and_is_a_pure_function_of_the_rng(seeds, seed):
    out = _draws(seeds, seed)
    assert [_typed(v) for v in out] == [_typed(v) for v in _draws(seeds, seed)]
    seed_types = {type(s) for s in seeds}
    scalar_types = {type(v) for s in seeds for v in _scalars(s, [])}
    for v in out:
        assert type(v) in seed_types
        assert {type(x) for x in _scalars(v, [])} <= scalar_types
        json.dumps(to_input(v))  # still input JSON


@settings(max_examples=150, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=4), st.integers(0, 2**31))
def test_mutation_stays_in_the_seeds_domain_and_size_bounds(seeds, seed):
    dom = infer_domain(seeds)
    flat = [v for s in seeds for v in _scalars(s, [])]
    ints = [v for v in flat if type(v) is int]
    floats = [v for v in flat if type(v) is float]
    strs = [v for v in flat if type(v) is str]
    seqs = [len(q) for s in seeds for q in _seqs(s, [])]
    chars = {c for s in strs for c in s}
    for v in _draws(seeds, seed):
        got = _scalars(v, [])
        for i in (x for x in got if type(x) is int):
            assert dom.ints is not None and dom.ints[0] <= i <= dom.ints[1]
            assert i >= 0 or min(ints) < 0  # the sign is kept when no seed is negative
            assert abs(i) <= max(abs(x) for x in ints) + max(2, (max(ints) - min(ints)) // 4)
        for f in (x for x in got if type(x) is float):
            assert dom.floats is not None and dom.floats[0] <= f <= dom.floats[1]
            assert f >= 0 or min(floats) < 0
        for s in (x for x in got if type(x) is str):
            assert set(s) <= chars and len(s) <= max(map(len, strs)) + 2
        for q in _seqs(v, []):
            assert len(q) <= min(max(seqs) + 2, MAX_LEN)
        if isinstance(v, (list, tuple)) and all(len(s) for s in seeds if isinstance(s, (list, tuple))):
            assert len(v) >= 1  # never empty unless a seed is
        if type(v) is tuple and len({len(s) for s in seeds if type(s) is tuple}) == 1:
            assert len(v) == len(next(s for s in seeds if type(s) is tuple))  # fixed-arity tuples


def test_examples_of_each_kind():
    assert {type(v) for v in _draws([True], 1)} == {bool} and len(set(_draws([True], 1))) == 2
    nonneg = _draws([0, 3, 8], 2, 200)
    assert min(nonneg) >= 0 and len(set(nonneg)) > 5 and max(nonneg) <= 8 + 2
    assert min(_draws([1, 5], 3, 200)) >= 1  # positive seeds: positive inputs
    assert min(_draws([-4, 5], 3, 200)) < -4  # widened below the seeds when negatives are allowed
    strs = _draws(["abc", "cab"], 4, 100)
    assert all(set(s) <= set("abc") for s in strs) and len(set(strs)) > 10
    lists = _draws([[1, 2, 3], [4, 5]], 5, 100)
    assert all(type(x) is list and 1 <= len(x) <= 5 for x in lists) and len({tuple(x) for x in lists}) > 10
    assert _draws([[[1], [2, 3]]], 6, 50) and all(
        all(type(e) is list for e in v) for v in _draws([[[1], [2, 3]]], 6, 50)
    )  # nested lists stay lists of lists (inserts come from the same depth)
    d = _draws([{"a": 1, 5: "x"}], 7, 50)
    assert all(set(x) == {"a", 5} for x in d) and any(x["a"] != 1 for x in d)
    assert _draws([None], 8, 5) == [None] * 5
    assert _draws([{1, 2}], 8, 3) == [{1, 2}] * 3  # other types unchanged


def test_non_input_values_are_refused():
    for bad in (float("inf"), 1j, object(), [1, float("nan")]):
        with pytest.raises(NotInputData):
            to_input(bad)


def test_mutate_spec_inputs_follow_the_seed_and_bad_seeds_are_a_task_error(tmp_path):
    spec = DynamicSpec(module="m", function="f", args=[{"mutate": [[1, 2], [3]]}, {"mutate": ["ab"]}])
    a = make_inputs(spec, 1)
    assert a == make_inputs(spec, 1) and a != make_inputs(spec, 2)
    assert all(type(xs) is list and type(s) is str for xs, s in a)
    with pytest.raises(TaskError, match="malformed argument strategy"):
        make_inputs(DynamicSpec(module="m", function="f", args=[{"mutate": []}]), 0)
    (tmp_path / "dynamic.json").write_text(
        json.dumps({"module": "m", "function": "f", "args": [], "reference_raises": "ignore"})
    )
    with pytest.raises(TaskError, match="reference_raises"):
        load_dynamic(tmp_path)
    (tmp_path / "dynamic.json").write_text(
        json.dumps({"module": "m", "function": "f", "args": [], "call_timeout_s": 0})
    )
    with pytest.raises(TaskError, match="call_timeout_s"):
        load_dynamic(tmp_path)


def test_skip_makes_reference_failures_unusable_match_keeps_them():
    ref = [{"ok": 1}, {"raised": "ValueError"}, {"timeout": 2.0}, {"bad": "x"}, {"ok": 2}]
    cand = [{"ok": 1}, {"ok": 0}, {"ok": 0}, {"ok": 0}, {"ok": 3}]
    assert usable_cases(ref, "skip") == [0, 4] and usable_cases(ref, "match") == [0, 1, 4]
    assert compare(ref, cand, "skip") == (0.5, 1)
    assert compare(ref, cand) == (1 / 3, 2)  # match: the candidate had to raise ValueError too
    assert compare(ref, [{"ok": 1}, {"raised": "ValueError"}, {}, {}, {"ok": 2}]) == (1.0, 0)
