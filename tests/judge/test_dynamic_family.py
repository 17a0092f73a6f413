"""Generated (dynamic) tests of the function-impl family: real generated tasks, real sandboxes, real judge."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from sparring.admission.check import check_task
from sparring.judge.base import JudgeRunError
from sparring.judge.dynamic.inputs import load_dynamic, make_inputs
from sparring.judge.inside.judge_driver import decode_args, encode
from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.dynamic_format import DYNAMIC_FILE
from sparring.tasks.families import generate
from sparring.tasks.families.function_impl import BUILTINS, builtin_records
from sparring.tasks.hacks import ADMISSION_DIR, overlay_diff
from sparring.tasks.importers import assert_examples
from sparring.tasks.loader import load_task, solution_diff


@pytest.fixture(scope="module")
def fi_tasks(tmp_path_factory):
    out = tmp_path_factory.mktemp("fi-dyn")
    return {t.id: t for t in generate("function-impl", len(BUILTINS), 7, out)}


def _task(fi_tasks, name):
    return fi_tasks[f"function-impl-{name.replace('_', '-')}"]


def _hack(task, name) -> WorkspaceDiff:
    return overlay_diff(task.hidden / ADMISSION_DIR / "hacks" / name)


def test_every_generated_task_has_dynamic_tests_in_its_domain(fi_tasks):
    """Each built-in's strategies draw inputs on which the reference runs and returns plain data."""
    assert len(fi_tasks) == len(BUILTINS)
    for t in fi_tasks.values():
        spec = load_dynamic(t.hidden)
        assert spec is not None and spec.module == "solution", t.id
        assert spec.cases * spec.repeat >= 80
        ns: dict = {}
        exec((t.path / "solution" / "solution.py").read_text(), ns)
        fn = ns[spec.function]
        for seed in range(5):
            for args in make_inputs(spec, seed):
                encode(fn(*decode_args(args)))  # raises on an out-of-domain input or a non-plain result


def test_where_relations_hold_and_inputs_follow_the_seed(fi_tasks):
    spec = load_dynamic(_task(fi_tasks, "clamp").hidden)
    assert spec is not None and spec.where == (("<=", 1, 2),)
    a = make_inputs(spec, 3)
    assert all(lo <= hi for _, lo, hi in a) and a == make_inputs(spec, 3) and a != make_inputs(spec, 4)
    merge = load_dynamic(_task(fi_tasks, "merge_sorted").hidden)
    assert merge is not None and all(x == sorted(x) for args in make_inputs(merge, 1) for x in args)


def test_hidden_lookup_table_covers_the_fixed_asserts():
    """The red-team workspace really does pass every fixed hidden assert that it can parse."""
    for rec in builtin_records(7):
        ns: dict = {}
        from sparring.tasks.importers import admission_hacks

        exec(admission_hacks(rec)[f"{ADMISSION_DIR}/hacks/hidden_lookup/solution.py"], ns)
        examples = assert_examples(rec.test)
        assert len(examples) >= rec.test.count("candidate(") - 1
        assert all(ns[rec.entry_point](*args) == expected for args, expected in examples)


@pytest.fixture(scope="module")
def judge(backend):
    return PytestJudge(backend, config=JudgeConfig(dynamic_seed=21, shuffle_seed=2))


@pytest.mark.parametrize("name", ["clamp", "running_sum", "word_counts"])
def test_reference_passes_and_hacks_that_pass_the_fixed_tests_score_zero(judge, fi_tasks, name):
    task = _task(fi_tasks, name)
    ref = asyncio.run(judge.score(task, solution_diff(task)))
    assert ref.reward == 1.0 and ref.components["dynamic"] == 1.0 and not ref.flags, ref.components
    for hack in ("hidden_lookup", "call_counting"):
        r = asyncio.run(judge.score(task, _hack(task, hack)))
        # it fools every fixed hidden test; only the generated tests, run in another process, see through it
        assert r.components["hidden_all_pass"] == 1.0, (hack, r.per_test)
        assert r.components["dynamic"] < 1.0 and r.metrics["dynamic_mismatches"] > 0, (hack, r.components)
        assert r.components["all_pass"] == 0.0 and r.reward == 0.0, (hack, r.components)


def test_same_evaluation_seed_same_verdict(judge, fi_tasks):
    task = _task(fi_tasks, "dedupe")
    a, b = (asyncio.run(judge.score(task, _hack(task, "call_counting"))) for _ in range(2))
    assert a.dynamic_seed == b.dynamic_seed == 21
    same = [k for k in a.components if k != "efficiency"]  # efficiency is wall time
    assert [a.components[k] for k in same] == [b.components[k] for k in same]
    assert a.metrics["dynamic_mismatches"] == b.metrics["dynamic_mismatches"] > 0
    other = PytestJudge(judge.backend, config=JudgeConfig(dynamic_seed=22, shuffle_seed=2))
    c = asyncio.run(other.score(task, _hack(task, "call_counting")))
    assert c.dynamic_seed == 22 and c.reward == 0.0


def test_a_counter_is_a_dict_but_a_dict_subclass_is_not(judge, fi_tasks):
    task = _task(fi_tasks, "word_counts")
    counter = (
        "from collections import Counter\n\n\ndef word_counts(s):\n    return Counter(s.lower().split())\n"
    )
    r = asyncio.run(judge.score(task, WorkspaceDiff(files={"solution.py": counter.encode()})))
    assert r.reward == 1.0, r.components
    sub = "class D(dict):\n    pass\n\n\ndef word_counts(s):\n    d = D()\n    for w in s.lower().split():\n"
    sub += "        d[w] = d.get(w, 0) + 1\n    return d\n"
    r = asyncio.run(judge.score(task, WorkspaceDiff(files={"solution.py": sub.encode()})))
    assert r.components["hidden_all_pass"] == 1.0 and r.reward == 0.0


def test_malformed_strategy_is_a_typed_bad_task(judge, fi_tasks, tmp_path):
    dst = tmp_path / "t"
    shutil.copytree(_task(fi_tasks, "clamp").path, dst)
    raw = json.loads((dst / "hidden" / DYNAMIC_FILE).read_text())
    raw["args"][0] = {"matrix": {"of": {"int": [0, 1]}}}  # no rows/cols
    (dst / "hidden" / DYNAMIC_FILE).write_text(json.dumps(raw))
    with pytest.raises(JudgeRunError) as e:
        asyncio.run(judge.score(load_task(dst), WorkspaceDiff()))
    assert e.value.reason == "bad_task"


def test_admission_needs_the_generated_tests(backend, fi_tasks, tmp_path):
    """Admission admits a generated task; the same task without dynamic.json is rejected as hackable."""
    task = _task(fi_tasks, "gcd")
    rep = asyncio.run(check_task(task, PytestJudge(backend), repeats=2))
    assert rep.ok, [p.to_json() for p in rep.problems]
    dst = tmp_path / "no-dyn"
    shutil.copytree(task.path, dst)
    (dst / "hidden" / DYNAMIC_FILE).unlink()
    rep = asyncio.run(check_task(load_task(dst), PytestJudge(backend), repeats=1))
    rules = {p.rule for p in rep.problems}
    assert {"hack_hidden_lookup_scores_zero", "hack_call_counting_scores_zero"} <= rules, rules
