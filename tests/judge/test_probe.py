"""Probes and the host's verdict: the expected side of every assert stays on the host, and a probe
plus the host's check agrees with the original asserts (property tests on plain values)."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.judge.dynamic.probe import Site, build_plan
from sparring.judge.inside import judge_observe as so
from sparring.judge.withheld import Observation, RefTrace, claim_holds, matches

SECRET_TEST = b"""\
import pytest
from mod import f, g

EXPECTED = [3, 1, 4, 1, 5, 9, 2, 6]
OTHER = "shown-to-candidate"


def test_list():
    assert f() == EXPECTED


def test_string():
    want = "secret-value-xyz"
    assert g(2) == want
    assert g(OTHER) is not None


def test_raises():
    with pytest.raises(KeyError, match="no such"):
        g(None)
"""


def test_expected_values_never_reach_the_probe():
    plan = build_plan({"hidden/test_secret.py": SECRET_TEST}, seed=1)
    src = plan.files["hidden/test_secret.py"]
    for secret in ("3, 1, 4", "secret-value-xyz", "KeyError", "no such"):
        assert secret not in src, (secret, src)
    assert "shown-to-candidate" in src  # used as an input, so it stays
    kinds = sorted(s.kind for s in plan.sites.values())
    assert kinds == ["raises", "value", "value", "value"]
    assert plan.withheld_names == 2  # EXPECTED and want are gone from the probe


def test_site_numbering_does_not_depend_on_the_coin_flips():
    src = (
        b"def test_a():\n    assert h(1)\n    assert not h(2)\n    assert h(3) == h(4)\n    assert f() == 2\n"
    )
    lifted = [build_plan({"hidden/test_a.py": src}, seed=s) for s in range(30)]
    kept = [build_plan({"hidden/test_a.py": src}, seed=s, fallback=frozenset({0, 1, 2})) for s in range(30)]
    shapes = {tuple((i, s.line) for i, s in sorted(p.sites.items())) for p in lifted + kept}
    assert len(shapes) == 1  # the reference's trace applies to either form
    assert [s.kind for s in lifted[0].sites.values()] == ["expr", "expr", "expr", "value"]
    assert [s.kind for s in kept[0].sites.values()] == ["bool", "bool", "bool", "value"]
    # ...while what a truth-valued site expects varies: both truth values occur for each.
    for sid in (0, 1, 2):
        assert {p.sites[sid].expected for p in kept} == {True, False}


def _run_probe(source: str, env: dict, test: str = "test_it", raw: bool = False) -> Any:
    """Execute one probe test function in-process (trusted test code here) and return its observations
    (``raw``: the recorder's rows, as they travel)."""
    so.RECORDER.start("t")
    ns = dict(env)
    code = source.replace("from judge_observe import", "from sparring.judge.inside.judge_observe import")
    exec(compile(code, "<probe>", "exec"), ns)  # noqa: S102 - our own generated probe
    with contextlib.suppress(AssertionError):
        ns[test]()
    rows = so.RECORDER.take()
    return rows if raw else {sid: sorted(vals) for sid, _n, vals, *_ in rows}


def _original_passes(source: bytes, env: dict) -> bool:
    ns = dict(env)
    exec(compile(source, "<orig>", "exec"), ns)  # noqa: S102 - the test's own asserts
    try:
        ns["test_it"]()
    except AssertionError:
        return False
    return True


PLAIN = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, width=32)
    | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)
ORIGINAL = b"""\
def test_it():
    assert f() == 2
    assert f() != (1, 2)
    assert f() in (1, 2, "a")
    assert not f() is None
    assert f() is not True
    assert [1] != f()
    assert bool(f()) or f() == 0
"""


@settings(max_examples=150, deadline=None)
@given(value=PLAIN, seed=st.integers(0, 2**31))
def test_probe_and_host_agree_with_the_original_asserts(value, seed):
    env = {"f": lambda: value}
    plan = build_plan({"hidden/test_it.py": ORIGINAL}, seed=seed)
    obs = _run_probe(plan.files["hidden/test_it.py"], env)
    host_ok = all(matches(plan.sites[sid], v) for sid, vals in obs.items() for v in vals)
    # The original stops at its first failing assert; the probe observes every site. Passing means all hold.
    assert host_ok == _original_passes(ORIGINAL, env)


@settings(max_examples=200, deadline=None)
@given(value=PLAIN)
def test_an_encoded_value_matches_itself_and_nothing_else(value):
    enc = so.encode(value)
    assert matches(Site("value", "==", value), enc)
    other = [value, 1] if value != [value, 1] else None
    assert not matches(Site("value", "==", other), enc)
    assert json.loads(enc) == json.loads(so.canonical(so.plain(value)))


def test_a_value_that_is_not_plain_data_never_matches():
    class Anything:
        def __eq__(self, other):
            return True

    assert not matches(Site("value", "==", 3), so.encode(Anything()))
    assert not matches(Site("value", "==", [1]), so.encode([Anything()]))


def test_raises_sites_accept_real_chains_and_refuse_forged_ones():
    site = Site("raises", expected=("KeyError",), match="no such")
    honest = json.dumps({"raised": ["m.Missing", "builtins.KeyError", "builtins.LookupError",
                                    "builtins.Exception", "builtins.BaseException", "builtins.object"],
                         "msg": "'no such key'"}, sort_keys=True)  # fmt: skip
    assert matches(site, honest)
    wrong_msg = honest.replace("no such", "other")
    assert not matches(site, wrong_msg)
    forged = json.dumps({"raised": ["builtins.KeyError", "builtins.ValueError", "builtins.TypeError",
                                    "builtins.Exception", "builtins.BaseException"], "msg": "no such"})  # fmt: skip
    assert not matches(site, forged)
    assert not matches(site, json.dumps({"raised": None}))


def test_a_claimed_pass_needs_every_site_the_reference_observed():
    site = Site("value", "==", 5, file="t.py", line=3)
    trace = RefTrace({"t": {0: 3}}, frozenset())
    full = {0: Observation(3, (so.encode(5),), False)}
    assert claim_holds("t", "passed", full, {0: site}, trace) == (True, "")
    ok, why = claim_holds("t", "passed", {0: Observation(1, (so.encode(5),), False)}, {0: site}, trace)
    assert not ok and "the reference 3" in why
    assert not claim_holds("t", "passed", {}, {0: site}, trace)[0]
    assert not claim_holds("t", "failed", full, {0: site}, trace)[0]
    wrong = {0: Observation(3, (so.encode(5), so.encode(6)), False)}
    assert not claim_holds("t", "passed", wrong, {0: site}, trace)[0]


def _raised(block) -> str:
    """What the probe's recorder reports for ``block`` (the real in-sandbox recorder, run here)."""
    so.RECORDER.start("t")
    with so.raises(0):
        block()
    ((_, _, values, _),) = so.RECORDER.take()
    return values[0]


def test_a_home_made_exception_named_like_the_builtins_matches_none_of_them():
    """Red team: one class whose bases are the candidate's own ``ValueError``, ``KeyError``, ... (a real
    class, no forgery) used to satisfy any ``pytest.raises`` of a built-in by bare name."""
    names = ["ValueError", "TypeError", "KeyError", "IndexError", "ZeroDivisionError", "RuntimeError"]
    universal = type("Universal", tuple(type(n, (Exception,), {}) for n in names), {})

    def boom():
        raise universal("no such thing")

    got = _raised(boom)
    assert all(f".{n}" in got for n in names)  # positive control: the chain names them all
    for n in names:
        assert not matches(Site("raises", expected=(n,)), got), n
    # A class of the candidate's own that a test names is still found, and real built-ins still match.
    assert matches(Site("raises", expected=("Universal",)), got)
    assert matches(Site("raises", expected=("KeyError",)), _raised(lambda: {}["x"]))
    assert matches(Site("raises", expected=("LookupError",)), _raised(lambda: [][1]))
    assert matches(Site("raises", expected=("IOError",)), _raised(lambda: os.stat("/nonexistent/x")))
    sub = type("ParseError", (ValueError,), {})

    def parse():
        raise sub("bad")

    assert matches(Site("raises", expected=("ValueError",)), _raised(parse))
    assert matches(Site("raises", expected=("ParseError",)), _raised(parse))


def test_a_count_without_values_satisfies_no_site():
    """Red team: a site claimed observed many times with no value left nothing to compare and passed."""
    site = Site("value", "==", 5, file="t.py", line=3)
    trace = RefTrace({"t": {0: 2}}, frozenset())
    assert claim_holds("t", "passed", {0: Observation(2, (so.encode(5),), False)}, {0: site}, trace)[0]
    ok, why = claim_holds("t", "passed", {0: Observation(10**6, (), False)}, {0: site}, trace)
    assert not ok and "without a value" in why
    from sparring.judge.report import MARK, parse_report

    line = (
        MARK
        + " "
        + json.dumps({"kind": "test", "id": "t", "outcome": "passed", "obs": [[0, 10**6, [], False]]})
    )
    rep = parse_report(line)
    assert rep.malformed == 1 and "t" not in rep.outcomes


def test_an_assert_message_keeps_no_expected_value_in_the_probe():
    """Red team: ``assert got == EXPECTED, f"... {EXPECTED}"`` dropped the message with the assert, but the
    message's read of ``EXPECTED`` counted as a use, so the expected value stayed in the probe where the
    candidate's code can read it (the probe's module globals, or its file)."""
    src = b"""\
from mod import f

BASE = 3
EXPECTED = [31415, 92653, 58979]
LIMIT = BASE + 27182


def test_a():
    got = f()
    assert got == EXPECTED, f"got {got}, want {EXPECTED}"


def test_b():
    want = 'secret-' + 'xyz'
    assert f() == want, want
    assert f() <= LIMIT, "over " + str(LIMIT)
"""
    plan = build_plan({"hidden/test_x.py": src}, seed=1)
    probe = plan.files["hidden/test_x.py"]
    for secret in ("31415", "secret-", "xyz", "27182", "BASE"):
        assert secret not in probe, (secret, probe)
    # Positive control: the host still holds each of them.
    assert [s.expected for s in plan.sites.values()] == [[31415, 92653, 58979], "secret-xyz", 27185]
    # A same-named variable bound to a call elsewhere is the test's own work, never dropped.
    other = b"from mod import f, g\n\n\ndef test_c():\n    want = g()\n    assert f() > 0\n"
    src_c = src.decode() + "\n\n" + other.decode().split("\n", 1)[1]
    assert "want = g()" in build_plan({"hidden/test_x.py": src_c.encode()}, seed=1).files["hidden/test_x.py"]


def _loop_claim(fn, n: int = 300) -> tuple[bool, str]:
    """The host's verdict on ``for i in range(n): assert f(i) >= 0`` run through the real recorder."""
    from sparring.judge.report import _observations

    plan = build_plan(
        {"hidden/test_x.py": b"def test_loop():\n    for i in range(N):\n        assert f(i) >= 0\n"}, 1
    )
    obs = _run_probe(plan.files["hidden/test_x.py"], {"f": fn, "N": n}, test="test_loop", raw=True)
    return claim_holds("t", "passed", _observations(obs), plan.sites, RefTrace({"t": {0: n}}, frozenset()))


def test_an_ordering_over_many_numbers_is_decided_by_their_extremes():
    """Honest code used to fail ``assert f(i) >= 0`` over 300 inputs: more than MAX_DISTINCT values made the
    site overflow. Numbers carry their smallest and largest value, which decide an ordering."""
    assert _loop_claim(lambda i: i) == (True, "")
    assert _loop_claim(lambda i: i / 3) == (True, "")
    ok, why = _loop_claim(lambda i: i - 5)  # the bad value is not among the values kept
    assert not ok and "observed -5" in why
    ok, why = _loop_claim(lambda i: -1 if i == 299 else i)
    assert not ok and "-1" in why
    assert not _loop_claim(lambda i: float("nan") if i == 7 else i)[0]
    assert not _loop_claim(lambda i: str(i))[0]
