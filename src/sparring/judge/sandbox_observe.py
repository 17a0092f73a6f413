"""What a probe test reports. It runs INSIDE the judge's sandbox, in the candidate's process.

The judge's test files are rewritten on the host (:mod:`sparring.judge.probe`):
each ``assert`` becomes ``observe(SITE, value)`` and each ``pytest.raises`` block
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
"""Distinct values kept per test and site; more marks the site as overflowing (the host fails it)."""


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


class Recorder:
    """Observations of the running test: site -> (count, distinct encoded values, overflow)."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.sites: dict[int, list[Any]] = {}

    def start(self, test_id: str) -> None:
        self.current = test_id
        self.sites = {}

    def take(self) -> list[list[Any]]:
        out = [[sid, n, sorted(vals), over] for sid, (n, vals, over) in sorted(self.sites.items())]
        self.sites = {}
        self.current = None
        return out

    def add(self, site: int, encoded: str) -> None:
        entry = self.sites.setdefault(site, [0, set(), False])
        entry[0] += 1
        if encoded not in entry[1]:
            if len(entry[1]) >= MAX_DISTINCT:
                entry[2] = True
            else:
                entry[1].add(encoded)


RECORDER = Recorder()


def observe(site: int, value: Any) -> None:
    RECORDER.add(int(site), encode(value))


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
