"""``expr`` sites: an assert that is not ``L op constant`` leaves only its leaves (the sub-expressions that run
code) in the probe; the skeleton over them (operators, constants, ``not``, the types asked for) is evaluated
on the host. Red team: the truth value a site wanted used to be readable from the probe's text."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.judge.dynamic.probe import build_plan
from sparring.judge.inside import judge_observe as so
from sparring.judge.report import MARK, _observations
from sparring.judge.withheld import RefTrace, claim_holds, matches, reference_trace

SKELETONS = b"""\
from mod import f, g

LIMIT = 41
WANT = (int, float)


def test_it():
    assert type(f()) is int
    assert isinstance(f(), WANT) and f() < LIMIT
    assert not g()
    assert f() == g() or f() is None
    assert f() is None or f()[0] == 1
    assert len(g()) >= 2 or any(g())
"""


def _run_probe(source: str, env: dict, test: str = "test_it") -> list[list[Any]]:
    """The recorder's rows (as they travel) of one probe test run in-process (trusted test code here)."""
    so.RECORDER.start("t")
    ns = dict(env)
    exec(
        compile(
            source.replace("from judge_observe", "from sparring.judge.inside.judge_observe"), "<p>", "exec"
        ),
        ns,
    )  # noqa: S102
    with contextlib.suppress(AssertionError):
        ns[test]()
    return so.RECORDER.take()


def _original(source: bytes, env: dict, test: str = "test_it") -> list[bool]:
    """Each assert of the original on its own (the original stops at the first failure)."""
    import ast

    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == test)
    ns = dict(env)
    exec(compile(ast.Module([s for s in tree.body if s is not fn], []), "<o>", "exec"), ns)  # noqa: S102
    out = []
    for st_ in fn.body:
        assert isinstance(st_, ast.Assert)
        try:
            out.append(bool(eval(compile(ast.Expression(st_.test), "<a>", "eval"), ns)))  # noqa: S307
        except Exception:  # noqa: BLE001 - an assert that raises does not hold
            out.append(False)
    return out


def test_the_skeleton_never_reaches_the_probe():
    plan = build_plan({"hidden/test_s.py": SKELETONS}, seed=1)
    probe = plan.files["hidden/test_s.py"].split("\n", 1)[1]  # past the import line
    body = probe.split("def test_it", 1)[1]
    for shown in ("int", "float", "41", "LIMIT", "WANT", "not ", " is ", "isinstance", "==", "<", ">",
                  "len(", "any(", " or ", " and "):  # fmt: skip
        assert shown not in body, (shown, probe)
    assert [s.kind for s in plan.sites.values()] == ["expr"] * 6
    # Positive control: the host holds every skeleton, with its constants.
    assert plan.sites[0].expected == "type(__leaf__(0)) is __c0" and dict(plan.sites[0].env)["__c0"] is int
    assert plan.sites[2].expected == "not __leaf__(0)"
    assert plan.withheld_names == 2  # LIMIT and WANT left the probe


PLAIN = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 50)
    | st.floats(allow_nan=False, width=32)
    | st.text(max_size=2),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=5,
)


@settings(max_examples=200, deadline=None)
@given(a=PLAIN, b=PLAIN | st.sampled_from([[1, 2], [2, 1, 2], (), [0, 0]]))
def test_probe_and_host_agree_with_each_original_assert(a, b):
    env = {"f": lambda: a, "g": lambda: b}
    plan = build_plan({"hidden/test_s.py": SKELETONS}, seed=3)
    src = plan.files["hidden/test_s.py"].replace("from mod import f, g", "")
    rows = _run_probe(src, env)
    host = [all(matches(plan.sites[sid], v) for v in vals) for sid, _n, vals, *_ in rows]
    assert [sid for sid, *_ in rows] == list(range(6))  # every site observed once
    assert host == _original(SKELETONS.replace(b"from mod import f, g", b""), env)


def _claim(plan, rows, n: int = 1) -> tuple[bool, str]:
    trace = RefTrace({"t": {sid: n for sid in plan.sites}}, frozenset())
    return claim_holds("t", "passed", _observations(rows), plan.sites, trace)


def test_a_forger_without_the_skeleton_has_nothing_to_copy():
    """Polarity forgery against leaves: reporting True (the usual polarity) for every leaf, or the honest
    value of a wrong solution, passes none of the sites a right answer passes."""
    src = b"def test_it():\n    assert type(f(2)) is int\n    assert not g(3)\n    assert f(1) in (5, 6)\n"
    plan = build_plan({"hidden/t.py": src}, seed=0)
    body = plan.files["hidden/t.py"]
    assert [s.kind for s in plan.sites.values()] == [
        "expr",
        "expr",
        "value",
    ]  # ``L in constant``: a value site
    honest = _run_probe(body, {"f": lambda x: x + 4, "g": lambda x: x > 3})
    assert _claim(plan, honest) == (True, "")  # positive control: right code passes
    true_everywhere = [
        [sid, 1, [so.canonical([{"v": True}] * plan.sites[sid].leaves)], False] for sid in plan.sites
    ]
    ok, why = _claim(plan, true_everywhere)
    assert not ok and "t.py:2" in why  # type(True) is bool, not int
    wrong = _run_probe(body, {"f": lambda x: "wrong", "g": lambda x: "wrong"})
    assert not _claim(plan, wrong)[0]


def test_a_leaf_that_raised_fails_only_where_the_assert_reads_it():
    plan = build_plan({"hidden/t.py": b"def test_it():\n    assert x() is None or x().n == 1\n"}, seed=0)
    site = plan.sites[0]
    assert site.leaves == 2
    ok_short = so.canonical([{"v": None}, {"err": "AttributeError"}])  # the original never reads x().n
    assert matches(site, ok_short)
    assert not matches(site, so.canonical([{"v": 3}, {"err": "AttributeError"}]))
    assert matches(site, so.canonical([{"v": 3}, {"v": 1}]))
    assert not matches(site, so.canonical([{"v": 3}, {"opaque": "Thing"}]))
    for forged in ('[{"v": null}]', '[{"v": null}, {"v": 1}, {"v": 1}]', '{"v": null}', '[{"v": null, "err": 1}, {}]',
                   '[{"v": {"float": "x"}}, {"v": 1}]', "[" * 5000):  # fmt: skip
        assert not matches(site, forged), forged


def _reference(plan, rows, outcome: str = "passed"):
    class Run:
        timed_out = False
        exit_code = 0
        stderr = ""
        stdout = "\n".join(
            MARK + " " + json.dumps(obj)
            for obj in (
                {"kind": "start"},
                {"kind": "test", "id": "t", "outcome": outcome, "obs": rows},
                {"kind": "done"},
            )
        )

    return reference_trace(Run(), plan)


def test_sites_the_reference_shows_the_host_cannot_evaluate_stay_truth_valued():
    """Leaves that are not plain data on the reference (an object of the solution's own class), and a
    skeleton the host's decoding cannot confirm where the reference passed, fall back to truth-valued sites
    in the candidate's plan, numbered the same; lifted sites the reference confirms stay lifted."""
    src = b"def test_it():\n    assert make().ok\n    assert make() != None and len(xs()) == 2\n    assert xs()\n"

    class Thing:
        ok = True

    env = {"make": Thing, "Thing": Thing, "xs": lambda: [1, 2]}
    ref_plan = build_plan({"hidden/t.py": src}, seed=0)
    assert [s.kind for s in ref_plan.sites.values()] == ["expr", "expr", "expr"]
    trace = _reference(ref_plan, _run_probe(ref_plan.files["hidden/t.py"], env))
    # Site 0's leaf is ``make().ok`` (True: plain); site 1 reads an object of the solution's class.
    assert trace.fallback == frozenset({1})
    cand = build_plan({"hidden/t.py": src}, seed=5, fallback=trace.fallback)
    assert [s.kind for s in cand.sites.values()] == ["expr", "bool", "expr"]
    rows = _run_probe(cand.files["hidden/t.py"], env)
    assert claim_holds("t", "passed", _observations(rows), cand.sites, trace) == (True, "")
    # A reference that fails the test marks nothing (it decides nothing for candidates).
    assert (
        _reference(ref_plan, _run_probe(ref_plan.files["hidden/t.py"], env), "failed").fallback == frozenset()
    )


@pytest.mark.parametrize("shadow", ["len = lambda x: 2", "from mod import sorted", "from mod import *"])
def test_a_builtin_the_test_file_rebinds_is_not_the_hosts(shadow):
    src = f"{shadow}\n\n\ndef test_it():\n    assert len(f()) == 2\n    assert sorted(f()) == [1]\n".encode()
    src += b"    assert len(f()) == 2 or g()\n    assert sorted(f()) == [1] or g()\n"  # expr sites, not value ones
    plan = build_plan({"hidden/t.py": src}, seed=0)
    assert [s.kind for s in plan.sites.values()] == ["value", "value", "expr", "expr"]
    names = ["len", "sorted"] if "*" in shadow else ["len"] if "len" in shadow else ["sorted"]
    for site in plan.sites.values():
        for (
            name
        ) in names:  # a star import may bind any of them; the rebound call is a leaf, run in the sandbox
            assert f"{name}(" not in str(site.expected), site


def test_an_expected_value_inside_arithmetic_or_a_string_method_leaves_the_probe():
    """Red team: ``abs(float(got) - TRUTH) <= TOL`` was a value site whose observed side carried TRUTH, and
    ``got.lower() == TRUTH.lower()`` a truth-valued site with TRUTH in it (now a value site: a constant string's method is a constant): the data-analysis family's answer
    was readable in the probe. Both are now host skeletons over ``float(got)`` / ``got.lower()``."""
    src = b"""\
TRUTH = 3.2571
TOLERANCE = 0.0005
LABEL = "Berlin-Ost"


def test_it():
    got = read()
    assert abs(float(got) - TRUTH) <= TOLERANCE
    assert got.lower() == LABEL.lower()
    assert f(1) + 7 == 10
"""
    plan = build_plan({"hidden/t.py": src}, seed=0)
    probe = plan.files["hidden/t.py"]
    for secret in ("3.2571", "0.0005", "Berlin", "TRUTH", "LABEL", "7", "10"):
        assert secret not in probe, (secret, probe)
    assert [s.kind for s in plan.sites.values()] == ["expr", "value", "expr"]  # LABEL.lower() is a constant

    def verdicts(answer: str, one: int) -> list[bool]:
        rows = _run_probe(probe, {"read": lambda: answer, "f": lambda x: one})
        return [all(matches(plan.sites[sid], v) for v in vals) for sid, _n, vals, *_ in rows]

    assert verdicts("3.2574", 3) == [True, False, True]  # positive control: right answers pass
    assert verdicts("3.2590", 2) == [False, False, False]
    assert matches(plan.sites[1], so.encode("berlin-ost")) and not matches(plan.sites[1], so.encode("berlin"))
