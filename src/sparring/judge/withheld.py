"""The host's verdict on a probe run: observations against the expectations that never left the host.

Pure functions over plain data (see :mod:`sparring.judge.dynamic.probe` for the sites and
:mod:`sparring.judge.inside.judge_observe` for the encoding). A test passes here only when

1. the test process says it ran to the end (``passed``): necessary, never sufficient,
   since the candidate controls that process;
2. every observation of every site the plan knows matches the site's expectation
   (a value that is not plain data, an overflowing site or an unknown shape fails);
3. each site the reference solution observed in this test was observed at least as
   often, with its values (a run that skips the asserts it cannot satisfy does not pass, nor
   does a count that comes with nothing to compare).
"""

from __future__ import annotations

import builtins
import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparring.judge.dynamic.probe import Site
from sparring.judge.dynamic.skeleton import HOST_CALLS, LEAF
from sparring.judge.inside.judge_observe import MAX_VALUE_CHARS, canonical, plain

SKIPPED = "asserts skipped"
Trace = dict[str, dict[int, int]]
"""test id -> site -> observations (a reference run's)."""


@dataclass(frozen=True)
class Observation:
    count: int
    values: tuple[str, ...]
    overflow: bool
    extremes: tuple[str, str] | None = None
    """With ``overflow``: the smallest and largest value when every value was a number."""


ORDERINGS = frozenset({"<", "<=", ">", ">="})


class Undecodable(ValueError):
    pass


def decode(v: Any) -> Any:
    """The Python value behind an encoded observation (the inverse of ``judge_observe.plain``)."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, list):
        return [decode(x) for x in v]
    if isinstance(v, dict) and len(v) == 1:
        ((tag, inner),) = v.items()
        if tag == "float" and isinstance(inner, str):
            return float(inner)
        if tag == "complex" and isinstance(inner, list) and len(inner) == 2:
            return complex(float(inner[0]), float(inner[1]))
        if tag == "bytes" and isinstance(inner, str):
            return bytes.fromhex(inner)
        if tag == "tuple" and isinstance(inner, list):
            return tuple(decode(x) for x in inner)
        if tag == "dict" and isinstance(inner, list):
            pairs = [(_key(decode(k)), decode(x)) for k, x in inner]
            _spread([k for k, _ in pairs])
            return dict(pairs)
        if tag in ("set", "frozenset") and isinstance(inner, list):
            keys = [_key(decode(x)) for x in inner]
            _spread(keys)
            return (set if tag == "set" else frozenset)(keys)
        if tag == "range" and isinstance(inner, list) and len(inner) == 3:
            r = range(*(int(i) for i in inner))
            if r.__len__() > MAX_RANGE:  # OverflowError past sys.maxsize: not a match either
                raise Undecodable("range too long")
            return r
    raise Undecodable(f"not plain data: {str(v)[:80]}")


MAX_RANGE = MAX_VALUE_CHARS
"""The longest range decoded: any longer one is iterated by ``all``/``max``/``sorted``/``set`` or an ``in``
of a non-int for as long as it is (``{"range": [0, 10**18, 1]}`` is 30 bytes); a list of as many numbers
could not travel either."""
MAX_SHARED_HASH = 8
"""Distinct keys of a set or dict allowed to share one hash. Ints hash modulo 2**61-1, so a report can
choose keys that all collide; building a set of n of them costs n**2 / 2 comparisons."""


def _key(x: Any) -> Any:
    if isinstance(x, list | dict | set):
        raise Undecodable("unhashable key")
    return x


def _spread(keys: list[Any]) -> None:
    """:class:`Undecodable` when more than :data:`MAX_SHARED_HASH` *distinct* keys share a hash.

    Linear: each key is compared with at most that many distinct keys of its hash seen before (equal keys,
    a list made a set, cost what they cost a set). A key that cannot be hashed raises as the set would."""
    seen: dict[int, list[Any]] = {}
    for k in keys:
        same = seen.setdefault(hash(k), [])
        if not any(k is s or k == s for s in same):
            if len(same) >= MAX_SHARED_HASH:
                raise Undecodable("too many keys share one hash")
            same.append(k)


def _approx_equal(got: Any, want: Any, rel: float | None, abs_: float | None) -> bool:
    """pytest.approx's rule: |got - want| <= max(rel * |want|, abs), defaults rel 1e-6 and abs 1e-12;
    sequences and mappings element by element."""
    if isinstance(want, dict):
        return (isinstance(got, dict) and got.keys() == want.keys()
                and all(_approx_equal(got[k], want[k], rel, abs_) for k in want))  # fmt: skip
    if isinstance(want, list | tuple):
        return (isinstance(got, list | tuple) and len(got) == len(want)
                and all(_approx_equal(g, w, rel, abs_) for g, w in zip(got, want, strict=True)))  # fmt: skip
    if isinstance(got, bool) or not isinstance(got, int | float) or isinstance(want, bool):
        return bool(got == want)
    if not isinstance(want, int | float):
        return False
    if math.isinf(want) or math.isinf(got):
        return got == want
    if rel is None and abs_ is not None:
        tol = abs_
    else:
        tol = max((1e-6 if rel is None else rel) * abs(want), 1e-12 if abs_ is None else abs_)
    return abs(got - want) <= tol


def _compare(op: str, got: Any, want: Any) -> bool:
    if op == "==":
        return bool(got == want)
    if op == "!=":
        return bool(got != want)
    if op == "is":
        return got is want
    if op == "is not":
        return got is not want
    if op == "<":
        return bool(got < want)
    if op == "<=":
        return bool(got <= want)
    if op == ">":
        return bool(got > want)
    if op == ">=":
        return bool(got >= want)
    if op == "in":
        return bool(got in want)
    if op == "not in":
        return bool(got not in want)
    if op == "contains":
        return bool(want in got)
    if op == "not contains":
        return bool(want not in got)
    raise ValueError(f"unknown comparison {op}")


def _builtin_chain_ok(chain: list[str]) -> bool:
    """The built-in exception classes in an observed class chain are exactly one built-in's own chain.

    A forged chain naming many unrelated built-ins (to match any ``pytest.raises``) fails this."""
    named = {c.split(".", 1)[1] for c in chain if c.startswith("builtins.")} - {"object"}
    real = {n for n in named if isinstance(getattr(builtins, n, None), type)
            and issubclass(getattr(builtins, n), BaseException)}  # fmt: skip
    if real != named or not real or len(chain) > 16:
        return False
    return any({c.__name__ for c in getattr(builtins, n).__mro__} - {"object"} == real for n in real)


def _is_builtin_exception(name: str) -> bool:
    obj = getattr(builtins, name, None)
    return isinstance(obj, type) and issubclass(obj, BaseException)


def _in_chain(name: str, chain: list[str]) -> bool:
    """``name`` (as the test wrote it) is a class of the observed chain.

    A built-in exception's name must be *the* built-in (``builtins.ValueError``): a bare-name match
    would accept a candidate's own classes named ``ValueError``, ``KeyError``, ... gathered into one
    exception's bases, which then satisfies any ``pytest.raises`` of a built-in without raising it."""
    if _is_builtin_exception(name):  # an alias (IOError, EnvironmentError) is the class it names
        return f"builtins.{getattr(builtins, name).__qualname__}" in chain
    return any(c.rsplit(".", 1)[-1] == name and not c.startswith("builtins.") for c in chain)


def matches(site: Site, encoded: str) -> bool:
    """One observation against its site's expectation. The text is the candidate's: anything it cannot
    parse or compare (deep nesting, a 5,000-digit number, an odd shape) is not a match, never an error."""
    if len(encoded) > MAX_VALUE_CHARS:
        return False  # the sandbox sends longer values as their digest: this one is forged, and costly
    try:
        raw = json.loads(encoded)
        if site.kind == "raises":
            if not isinstance(raw, dict) or not isinstance(raw.get("raised"), list):
                return False
            chain = [str(c) for c in raw["raised"]]
            if not _builtin_chain_ok(chain) or not any(_in_chain(n, chain) for n in site.expected):
                return False
            return site.match is None or re.search(site.match, str(raw.get("msg", ""))) is not None
        if site.kind == "bool":
            return raw is site.expected
        if site.kind == "expr":
            return _skeleton_holds(site, raw)
        if (
            isinstance(raw, dict)
            and "opaque" in raw
            and site.op in ("is", "is not")
            and (site.expected is None or site.expected is True or site.expected is False)
        ):
            return site.op == "is not"  # an object that is not plain data is none of these (plain data)
        if isinstance(raw, dict) and "digest" in raw:
            # Too long to travel: equal only if the expected value encodes to the same digest.
            want = canonical(plain(site.expected))
            return site.op == "==" and site.approx is None and want == encoded
        got = decode(raw)
        if site.approx is not None:
            eq = _approx_equal(got, site.expected, *site.approx)
            return eq if site.op == "==" else not eq
        return _compare(site.op, got, site.expected)
    except Exception:  # noqa: BLE001 - any value the comparison cannot handle is not a match
        return False


class _LeafFailed(Exception):
    """The skeleton read a leaf that raised in the sandbox, or an opaque leaf as more than a truth value."""


class _Truth:
    """An opaque leaf (not plain data in the sandbox) whose truth value was reported: ``assert is_sorted(xs)``
    on a solution that returns ``numpy.bool_`` or a result object. Only ``bool``, ``not``/``and``/``or`` and
    ``is None`` (never, as ``None`` is plain) may read it; anything else fails the site, since it would
    answer for an object the host never saw (``!=`` would be identity, ``type`` this class)."""

    __slots__ = ("truth",)

    def __init__(self, truth: bool) -> None:
        self.truth = truth

    def __bool__(self) -> bool:
        return self.truth

    def _refuse(self, *_: Any) -> Any:
        raise _LeafFailed

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __iter__ = __len__ = _refuse
    __hash__ = None  # type: ignore[assignment]


def _guarded(name: str) -> Any:
    """The host's built-in ``name`` for skeletons: all but ``bool`` refuse :class:`_Truth` arguments (``type``
    and ``isinstance`` would not ask them), and ``set``/``frozenset`` refuse keys chosen to share one hash."""
    fn = getattr(builtins, name)

    def call(*args: Any) -> Any:
        if name != "bool" and any(isinstance(a, _Truth) for a in args):
            raise _LeafFailed
        if name in ("set", "frozenset"):
            items = list(args[0])
            _spread(items)
            return fn(items)
        return fn(*args)

    return call


_HOST_BUILTINS = {n: _guarded(n) for n in HOST_CALLS}


@functools.lru_cache(maxsize=4096)
def _skeleton_code(src: str) -> Any:
    return compile(src, "<judge-skeleton>", "eval")


def _skeleton_holds(site: Site, raw: Any) -> bool:
    """The assert's skeleton, evaluated on the host over one observation's leaves. The skeleton is built
    from the judge's own test source (comparisons, ``not``/``and``/``or``, constants, :data:`HOST_CALLS`);
    the leaves are decoded plain data, so nothing of the candidate's runs here."""
    if not isinstance(raw, list) or len(raw) != site.leaves:
        return False
    values: list[Any] = []
    for item in raw:
        if isinstance(item, dict) and len(item) == 1 and "v" in item:
            values.append(decode(item["v"]))
        elif isinstance(item, dict) and len(item) == 1 and ("err" in item or "opaque" in item):
            values.append(_LeafFailed)
        elif (
            isinstance(item, dict) and item.keys() == {"opaque", "truth"} and isinstance(item["truth"], bool)
        ):
            values.append(_Truth(item["truth"]))
        else:
            return False

    def leaf(k: int) -> Any:
        v = values[k]
        if v is _LeafFailed:
            raise _LeafFailed
        return v

    env = {**dict(site.env), LEAF: leaf}
    return bool(eval(_skeleton_code(str(site.expected)), {"__builtins__": _HOST_BUILTINS}, env))  # noqa: S307


@dataclass(frozen=True)
class RefTrace:
    """What the reference solution's run of the probes showed: per passing test, how often it observed
    each site; and the value sites where even the reference produced something that is not plain data
    (``unverifiable``: the host cannot compare those, so they are left out; the test's other sites
    still count). A site the reference *fails* stays: the reference fails that test, as admission sees."""

    counts: Trace
    unverifiable: frozenset[int]
    fallback: frozenset[int] = frozenset()
    """``expr`` sites whose skeleton the host could not confirm on the reference (its leaves were not plain
    data, too many or too long, or the host's evaluation said no where the reference passed): candidates
    get them as truth-valued sites (:func:`sparring.judge.dynamic.probe.build_plan`)."""


def claim_holds(
    test_id: str,
    outcome: str,
    observed: Mapping[int, Observation],
    sites: Mapping[int, Site],
    trace: RefTrace,
) -> tuple[bool, str]:
    """(passed, why not) for one test of the candidate's run."""
    if outcome != "passed":
        return False, outcome
    for sid, obs in observed.items():
        site = sites.get(sid)
        if site is None or sid in trace.unverifiable:
            continue  # nothing the host can expect here
        if obs.overflow:
            # Only an ordering against a constant is decided by the extremes of numbers alone.
            if not (site.kind == "value" and site.op in ORDERINGS and site.approx is None and obs.extremes):
                return False, f"{site.file}:{site.line}: too many distinct values observed"
            for v in obs.extremes:
                if not matches(site, v):
                    return False, f"{site.file}:{site.line}: observed {v[:120]}"
        for v in obs.values:
            if not matches(site, v):
                return False, f"{site.file}:{site.line}: observed {v[:120]}"
    for sid, n in trace.counts.get(test_id, {}).items():
        if sid in trace.unverifiable:
            continue
        got = observed.get(sid)
        if got is None or got.count < n or not got.values:
            # A count is a claim; only values can be compared. Observations with none compare nothing.
            site = sites.get(sid)
            where = f"{site.file}:{site.line}" if site else str(sid)
            seen = f"{got.count} times" + ("" if got.values else " without a value") if got else "0 times"
            return False, f"{where}: observed {seen}, the reference {n} ({SKIPPED})"
    return True, ""


HostOutcomes = tuple[dict[str, str], list[tuple[str, str]]]
"""Each reported test's outcome as the host decides it, and the claimed passes it rejected (with why)."""


def host_outcomes(report: Any, plan: Any, trace: RefTrace) -> HostOutcomes:
    """Each reported test's outcome as the host decides it, and the claimed passes it rejected (with why)."""
    outcomes: dict[str, str] = {}
    rejected: list[tuple[str, str]] = []
    for tid, claim in report.outcomes.items():
        ok, why = claim_holds(tid, claim, report.observations.get(tid, {}), plan.sites, trace)
        outcomes[tid] = "passed" if ok else ("failed" if claim == "passed" else claim)
        if claim == "passed" and not ok:
            rejected.append((tid, why))
    return outcomes, rejected


def reference_trace(run: Any, plan: Any) -> RefTrace:
    """The trace of the reference solution's probe run (an ``ExecResult``); a run that did not finish is the
    judge's problem (``reference_failed``), never the candidate's."""
    from sparring.judge.base import JudgeRunError
    from sparring.judge.report import parse_report

    if run is None:
        raise JudgeRunError("reference_failed", "the reference solution's test run did not happen")
    rep = parse_report(run.stdout)
    if run.timed_out or not rep.started or not rep.done:
        why = "timed out" if run.timed_out else f"exit {run.exit_code}"
        raise JudgeRunError(
            "reference_failed",
            f"the reference solution's test run did not finish ({why}): {run.stderr[-600:]}",
        )
    bad: set[int] = set()
    fallback: set[int] = set()
    for tid, obs in rep.observations.items():
        for sid, o in obs.items():
            site = plan.sites.get(sid)
            if site is not None and site.kind == "value" and any(_opaque(v) for v in o.values):
                bad.add(sid)
            if (
                site is not None
                and site.kind == "expr"
                and (
                    o.overflow
                    or (rep.outcomes.get(tid) == "passed" and not all(matches(site, v) for v in o.values))
                )
            ):
                fallback.add(sid)
    return RefTrace(trace_of(rep.observations, rep.outcomes), frozenset(bad), frozenset(fallback))


def _opaque(encoded: str) -> bool:
    """An observation the host cannot compare: the value was not plain data."""
    try:
        raw = json.loads(encoded)
    except (ValueError, RecursionError):
        return True
    return isinstance(raw, dict) and "opaque" in raw


def trace_of(observations: Mapping[str, Mapping[int, Observation]], outcomes: Mapping[str, str]) -> Trace:
    """The reference run's site counts, for the tests it passed."""
    return {tid: {sid: o.count for sid, o in obs.items()} for tid, obs in observations.items()
            if outcomes.get(tid) == "passed"}  # fmt: skip
