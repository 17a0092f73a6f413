"""Red team of ``expr`` sites (and the decoding they share with value sites): what a candidate's report can
make the host do, and honest code the probes must not fail.

Attack payloads here are plain test values (what a hostile sandbox could report); the ones that would hang
an unfixed host run in a child process with a timeout, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from sparring.judge.dynamic.probe import build_plan
from sparring.judge.inside import judge_observe as so
from sparring.judge.report import _observations
from sparring.judge.withheld import RefTrace, Undecodable, claim_holds, decode, matches


def _run_probe(source: str, env: dict) -> list[list[object]]:
    """The recorder's rows of one probe test run in-process (trusted test code here)."""
    so.RECORDER.start("t")
    ns = dict(env)
    code = compile(
        source.replace("from judge_observe", "from sparring.judge.inside.judge_observe"), "<p>", "exec"
    )
    exec(code, ns)  # noqa: S102
    ns["test_it"]()
    return so.RECORDER.take()


P61 = (1 << 61) - 1
"""Python hashes an int modulo this prime: its multiples all hash to 0."""


def _leaves(*values: object) -> str:
    return so.canonical([{"v": so.plain(v)} for v in values])


def _site(src: str, k: int = 0):
    return build_plan({"hidden/t.py": f"def test_it():\n    {src}\n".encode()}, seed=0).sites[k]


# --- host DoS -----------------------------------------------------------------------------------------


def test_a_huge_range_cannot_make_the_host_iterate():
    """``{"range": [1, 10**18, 1]}`` is 30 bytes; ``all``/``max``/``sorted``/``set`` of it, or ``"a" in`` it
    (linear for anything but an int), would run for ages on the host. A child process with a timeout
    stands in for the judge."""
    code = textwrap.dedent(
        """
        import json, sys
        from sparring.judge.dynamic.probe import build_plan
        from sparring.judge.withheld import matches
        src = b'''def test_it():
            assert all(f())
            assert max(f()) > 3
            assert sorted(f()) == [1]
            assert set(f()) == {1} or g()
            assert "a" in f()
            assert 2.5 in f() or g()
        '''
        sites = build_plan({"t.py": src}, seed=0).sites
        huge = {"range": [1, 10**18, 1]}
        out = []
        for sid, site in sorted(sites.items()):
            enc = json.dumps(huge if site.kind == "value" else [{"v": huge}] * site.leaves)
            out.append([site.kind, matches(site, enc)])
        small = {"range": [1, 4, 1]}
        out.append(["control", matches(sites[0], json.dumps([{"v": small}]))])
        print(json.dumps(out))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got[-1] == ["control", True]  # positive control: a small range still decodes (all(1, 2, 3))
    assert {k for k, _ in got[:-1]} == {"expr", "value"}  # both kinds decode what the sandbox reports
    assert not any(ok for _, ok in got[:-1]), got


def _env() -> dict[str, str]:
    import os

    import sparring

    src = os.path.dirname(os.path.dirname(sparring.__file__))
    return {**os.environ, "PYTHONPATH": src}


@pytest.mark.parametrize("tag", ["set", "frozenset", "dict"])
def test_keys_that_share_one_hash_are_refused(tag):
    """Ints that are multiples of 2**61-1 all hash to 0: a set of n of them costs n**2 / 2 comparisons to
    build (3,000 in a 64 KiB value; 40,000 in the 1 MiB a report may hold: seconds to minutes of host CPU)."""
    keys = [P61 * i for i in range(1, 600)]
    assert len({hash(k) for k in keys}) == 1  # positive control: the payload really collides
    items = [[k, 0] for k in keys] if tag == "dict" else keys
    with pytest.raises(Undecodable):
        decode({tag: items})
    # Honest data of the same size, and equal values repeated (a list made a set), still decode.
    fine = list(range(1, 600))
    assert len(decode({tag: [[k, 0] for k in fine] if tag == "dict" else fine})) == 599
    assert decode({"set": [5] * 600 + [-1, -2]}) == {5, -1, -2}
    site = _site("assert set(f()) == {-1, -2} or g()")
    assert matches(site, _leaves([-1] + [-2] * 600, None))  # hash(-1) == hash(-2): two values, many times


def test_the_skeletons_set_of_colliding_leaves_is_refused():
    site = _site("assert set(f()) == {1} or frozenset(g()) == {2}")
    assert site.kind == "expr" and site.leaves == 2
    bad = [P61 * i for i in range(1, 600)]
    assert not matches(site, _leaves(bad, [2]))
    assert not matches(site, _leaves([3], bad))
    assert matches(site, _leaves([1, 1, 1], bad))  # the original never reads g()'s set: nor does the host
    assert matches(site, _leaves([3], [2, 2]))  # positive control


def test_an_encoding_longer_than_the_sandbox_would_send_is_no_match():
    """The sandbox sends values over MAX_VALUE_CHARS as their digest; a report may still carry one: the
    host refuses it before parsing (bounding what any decoding or comparison costs per value)."""
    site = _site("assert len(f()) > 3 or g()")
    n = so.MAX_VALUE_CHARS // 2
    long = json.dumps([{"v": [0] * n}, {"v": None}], separators=(",", ":"))
    assert len(long) > so.MAX_VALUE_CHARS
    assert not matches(site, long)
    assert matches(site, _leaves([0] * 4, None))  # positive control
    value = build_plan({"t.py": b"def test_it():\n    assert f() != 3\n"}, seed=0).sites[0]
    assert value.kind == "value"
    assert not matches(value, json.dumps([0] * n))
    assert matches(value, json.dumps([0] * 10))


# --- honest code failing --------------------------------------------------------------------------------


class Verdict:
    """An object that is not plain data (a numpy bool, a result object) with a truth value."""

    def __init__(self, ok: bool) -> None:
        self.ok = ok

    def __bool__(self) -> bool:
        return self.ok


def _claim(plan, rows) -> tuple[bool, str]:
    trace = RefTrace({"t": {sid: 1 for sid in plan.sites}}, frozenset())
    return claim_holds("t", "passed", _observations(rows), plan.sites, trace)


TRUTHS = b"""\
def test_it():
    assert check(1)
    assert not check(0)
    assert check(1) and f() == 3
    assert check(1) is not None
"""


def test_a_leaf_that_is_not_plain_data_still_has_a_truth_value():
    """``assert is_sorted(xs)`` on a solution that returns ``numpy.bool_`` (not a ``bool``) or an object
    with ``__bool__``: the original only asks its truth value; the host must not fail it for not being
    plain data (the reference returning a real ``bool`` keeps the site lifted)."""
    plan = build_plan({"hidden/t.py": TRUTHS}, seed=0)
    kinds = ["expr"] * 3 + ["value"]  # ``L is not None``: a value site
    assert [s.kind for s in plan.sites.values()] == kinds
    for make in (Verdict, pytest.importorskip("numpy").bool_):
        rows = _run_probe(plan.files["hidden/t.py"], {"check": lambda x, m=make: m(bool(x)), "f": lambda: 3})
        assert _claim(plan, rows) == (True, ""), make
    wrong = _run_probe(plan.files["hidden/t.py"], {"check": lambda x: Verdict(not x), "f": lambda: 3})
    assert not _claim(plan, wrong)[0]


@pytest.mark.parametrize(
    "assertion",
    [
        "assert f() != 3 or g() is None",
        "assert not f() == 3",
        "assert type(f()) is not type(g())",
        "assert type(f()) == type(g())",
        "assert not isinstance(f(), list)",
        "assert f() not in (1, 2) or g() is None",
        "assert len(f()) or g() is None",
        "assert f() is not True and not f() <= 3",
        "assert min(f(), g()) or g() is None",
    ],
)
def test_an_opaque_leaf_is_only_a_truth_value(assertion):
    """Nothing but ``bool``, ``not``/``and``/``or`` and ``is None`` may read an opaque leaf on the host: a
    comparison, ``type`` or ``isinstance`` of it would answer for an object the host never saw."""
    site = _site(assertion)
    assert site.kind == "expr"
    opaque = so.canonical([{"opaque": "Thing", "truth": True}] * site.leaves)
    assert not matches(site, opaque)


def test_an_async_comprehension_stays_out_of_the_lambdas():
    """``lambda: [x async for x in it]`` does not compile: one such leaf would make the whole probe file
    a syntax error (every test of it failing, the reference's too)."""
    src = b"async def test_it():\n    assert [x async for x in ag()] == g()\n    assert f(1) == g()\n"
    plan = build_plan({"hidden/t.py": src}, seed=0)
    compile(plan.files["hidden/t.py"], "<probe>", "exec")
    assert [s.kind for s in plan.sites.values()] == ["bool", "expr"]


RAISES_INSIDE = b"""\
import pytest


def test_it():
    with pytest.raises(ValueError):
        assert f(-1) == g(1)
    with pytest.raises(ValueError):
        assert not f(-1)
    assert g(1) or f(-1) == 2
"""


def test_an_exception_the_original_assert_raises_still_propagates():
    """``with pytest.raises(E): assert f(bad) == g(x)``: the original's assert raises ``E`` from its first
    leaf, which pytest.raises expects. Leaves the original always evaluates (not behind ``and``/``or`` or a
    chained comparison) raise as they would; only the ones it might skip are recorded instead."""

    def f(x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x

    plan = build_plan({"hidden/t.py": RAISES_INSIDE}, seed=0)
    kinds = [s.kind for s in plan.sites.values()]
    assert kinds == ["expr", "raises", "expr", "raises", "expr"]  # a block's asserts are numbered first
    rows = _run_probe(plan.files["hidden/t.py"], {"f": f, "g": lambda x: x})
    assert [r[0] for r in rows] == [1, 3, 4]  # the asserts inside the blocks raised, as the originals do
    trace = RefTrace({"t": {1: 1, 3: 1, 4: 1}}, frozenset())
    assert claim_holds("t", "passed", _observations(rows), plan.sites, trace) == (True, "")
    # The third assert's f(-1) is behind ``or``: recorded, not raised (g(1) is true, so never read).
    assert json.loads(rows[2][2][0])[1] == {"err": "ValueError"}


def test_a_starred_argument_is_a_leaf_like_any_other():
    src = b"def test_it():\n    assert f(*ARGS) == g()\n    assert not f(*ARGS, 1)\n\n\nARGS = (1, 2)\n"
    plan = build_plan({"hidden/t.py": src}, seed=0)
    assert [s.kind for s in plan.sites.values()] == ["expr", "expr"]
    rows = _run_probe(plan.files["hidden/t.py"], {"f": lambda *a: sum(a), "g": lambda: 3})
    assert _claim(plan, rows) == (False, _claim(plan, rows)[1])  # f(1, 2, 1) == 4 is true: the second fails
    assert "t.py:3" in _claim(plan, rows)[1]
    rows = _run_probe(
        plan.files["hidden/t.py"], {"f": lambda *a: sum(a) if len(a) == 2 else 0, "g": lambda: 3}
    )
    assert _claim(plan, rows) == (True, "")


def test_a_side_effect_of_a_leaf_the_original_skips_sends_the_site_back_to_truth_values():
    """Leaves run eagerly: ``(ready() or c.bump()) and c.count == 0`` bumps even where the original does not.
    The host cannot see that; the reference run does (its host evaluation fails where it passed), so the
    site stays truth-valued for candidates, and an honest candidate still passes."""
    from sparring.judge.report import MARK
    from sparring.judge.withheld import reference_trace

    src = b"def test_it():\n    assert (ready() or c.bump()) and c.count == 0\n"

    class Counter:
        count = 0

        def bump(self) -> bool:
            self.count += 1
            return True

    def env() -> dict:
        return {"ready": lambda: True, "c": Counter()}

    ref_plan = build_plan({"hidden/t.py": src}, seed=0)
    assert [s.kind for s in ref_plan.sites.values()] == ["expr"]
    rows = _run_probe(ref_plan.files["hidden/t.py"], env())
    lines = [
        {"kind": "start"},
        {"kind": "test", "id": "t", "outcome": "passed", "obs": rows},
        {"kind": "done"},
    ]

    class Run:
        timed_out, exit_code, stderr = False, 0, ""
        stdout = "\n".join(f"{MARK} {json.dumps(o)}" for o in lines)

    trace = reference_trace(Run(), ref_plan)
    assert trace.fallback == frozenset({0})  # positive control: the eager bump really changed c.count
    cand = build_plan({"hidden/t.py": src}, seed=1, fallback=trace.fallback)
    assert [s.kind for s in cand.sites.values()] == ["bool"]
    rows = _run_probe(cand.files["hidden/t.py"], env())
    assert claim_holds("t", "passed", _observations(rows), cand.sites, trace) == (True, "")
