"""What a probe test reports. It runs INSIDE the judge's sandbox, in the candidate's process.

The judge's test files are rewritten on the host (:mod:`sparring.judge.dynamic.probe`):
each ``assert`` becomes ``observe(SITE, value)`` or ``leaves(SITE, thunk, ...)`` and each ``pytest.raises`` block
``with raises(SITE):``. This module only records what was observed, per running
test, as plain data; it decides nothing, holds nothing secret and may be freely
tampered with: whatever it reports, the host compares it with the expected
values, which never enter the sandbox.

The host imports :func:`plain` and :func:`canonical` too, to encode its own
expected values exactly as observations are encoded. Only the standard library
may be imported here.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

MAX_VALUE_CHARS = 64 * 1024
"""An observed value whose encoding is longer travels as its digest (compared for equality only)."""
MAX_DISTINCT = 256
"""Distinct values kept per test and site; more marks the site as overflowing. The host fails an
overflowing site unless every value was a number: then the smallest and the largest travel too, which
is all an ordering (``assert f(i) >= 0`` over a thousand inputs) needs."""


class Opaque(Exception):
    """A value that is not plain data."""


def plain(x: Any, depth: int = 0) -> Any:
    """A JSON value for ``x`` as plain data: subclasses of the built-in types become the base type
    (an IntEnum is its int, a namedtuple its tuple); floats, tuples, sets, dicts and bytes are tagged."""
    if depth > 60:
        raise Opaque("nested too deeply")
    if x is None or x is True or x is False:
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        f = float(x)
        return {"float": "nan" if math.isnan(f) else repr(f)}
    if isinstance(x, complex):
        c = complex(x)
        return {"complex": [repr(c.real), repr(c.imag)]}
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, bytes | bytearray):
        return {"bytes": bytes(x).hex()}
    if isinstance(x, list):
        return [plain(v, depth + 1) for v in list(x)]
    if isinstance(x, tuple):
        return {"tuple": [plain(v, depth + 1) for v in tuple(x)]}
    if isinstance(x, dict):
        items = [[plain(k, depth + 1), plain(v, depth + 1)] for k, v in dict.items(x)]
        return {"dict": sorted(items, key=lambda kv: json.dumps(kv, sort_keys=True))}
    if isinstance(x, set | frozenset):
        tag = "frozenset" if isinstance(x, frozenset) else "set"
        return {tag: sorted((plain(v, depth + 1) for v in x), key=lambda v: json.dumps(v, sort_keys=True))}
    if isinstance(x, range):
        return {"range": [x.start, x.stop, x.step]}
    raise Opaque(type(x).__qualname__)


def canonical(value: Any) -> str:
    """The encoding that travels: plain data as compact JSON, or its digest when too long."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_VALUE_CHARS:
        return json.dumps({"digest": hashlib.sha256(text.encode()).hexdigest()})
    return text


def encode(x: Any) -> str:
    try:
        return canonical(plain(x))
    except (Opaque, RecursionError, ValueError, TypeError) as e:
        return json.dumps({"opaque": str(e)[:200]})


def _number(x: Any) -> int | float | None:
    """``x`` if it is a plain int or float that orders with every other (not a bool, not NaN)."""
    if type(x) is int or (type(x) is float and not math.isnan(x)):
        return x
    return None


class Recorder:
    """Observations of the running test: site -> [count, distinct encoded values, overflow, range], the
    range being [smallest, largest] while every value was a number, else None."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.sites: dict[int, list[Any]] = {}

    def start(self, test_id: str) -> None:
        self.current = test_id
        self.sites = {}

    def take(self) -> list[list[Any]]:
        out = []
        for sid, (n, vals, over, rng) in sorted(self.sites.items()):
            row = [sid, n, sorted(vals), over]
            if over and rng is not None:
                row.append([encode(rng[0]), encode(rng[1])])
            out.append(row)
        self.sites = {}
        self.current = None
        return out

    def add(self, site: int, encoded: str, value: Any = None) -> None:
        num = _number(value)
        entry = self.sites.setdefault(site, [0, set(), False, None if num is None else [num, num]])
        entry[0] += 1
        if entry[3] is not None:
            entry[3] = None if num is None else [min(entry[3][0], num), max(entry[3][1], num)]
        if encoded not in entry[1]:
            if len(entry[1]) >= MAX_DISTINCT:
                entry[2] = True
            else:
                entry[1].add(encoded)


RECORDER = Recorder()


def observe(site: int, value: Any) -> None:
    RECORDER.add(int(site), encode(value), value)


def leaves(site: int, *thunks: Any, strict: int = 0) -> None:
    """One evaluation of an ``expr`` site: each leaf's value as plain data (``{"v": ...}``), or what kept it
    from being one (``{"err": exception class}``, ``{"opaque": type, "truth": bool(value)}``). The host
    evaluates the skeleton and reads only the leaves the original assert would have evaluated. An exception
    of one of the first ``strict`` leaves, which the original always evaluates, is raised as the original
    would (``with pytest.raises(E): assert f(bad) == x``); the others' are only recorded, since the original
    might have skipped them."""
    out: list[dict[str, Any]] = []
    for i, thunk in enumerate(thunks):
        try:
            value = thunk()
        except Exception as e:  # noqa: BLE001 - recorded; the host fails the site if it needs this leaf
            if i < strict:
                raise  # the first ``strict`` leaves are ones the original always evaluates: its own exception
            out.append({"err": type(e).__name__[:200]})
            continue
        try:
            out.append({"v": plain(value)})
        except (Opaque, RecursionError, ValueError, TypeError) as e:
            out.append(_opaque(value, str(e)[:200]))
    RECORDER.add(int(site), canonical(out))


def _opaque(value: Any, why: str) -> dict[str, Any]:
    """A leaf that is not plain data, with its truth value where it has one: ``assert is_sorted(xs)`` asks
    only that of a ``numpy.bool_`` (the host lets nothing else read it)."""
    try:
        return {"opaque": why, "truth": bool(value)}
    except Exception:  # noqa: BLE001 - no truth value (a numpy array): the original assert would raise too
        return {"opaque": why}


class raises:  # noqa: N801 - used like pytest.raises
    """``with raises(SITE) as info:`` records what the block raised (class chain and message) and
    suppresses it; ``info.value``, ``info.type`` and ``info.typename`` work as with pytest's."""

    def __init__(self, site: int) -> None:
        self.site = int(site)
        self.value: BaseException | None = None
        self.type: type[BaseException] | None = None

    @property
    def typename(self) -> str:
        return self.type.__name__ if self.type is not None else ""

    def __enter__(self) -> raises:
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        if et is None:
            RECORDER.add(self.site, json.dumps({"raised": None}))
            raise AssertionError("DID NOT RAISE")
        if not issubclass(et, Exception):
            return False  # KeyboardInterrupt, SystemExit: not what a test asks to see raised
        chain = [f"{c.__module__}.{c.__qualname__}" for c in et.__mro__]
        try:
            msg = str(ev)[:2000]
        except Exception:  # noqa: BLE001 - a message that cannot be shown matches no pattern
            msg = ""
        RECORDER.add(self.site, json.dumps({"raised": chain, "msg": msg}, sort_keys=True))
        self.value, self.type = ev, et
        return True
