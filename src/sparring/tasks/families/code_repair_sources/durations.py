"""Base ``durations``: parsing and formatting human-readable durations."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Human durations such as '1h30m' or '2 days, 4 hours'."""
from durations.parse import format_duration, parse_duration, to_unit

__all__ = ["format_duration", "parse_duration", "to_unit"]
'''

_UNITS = r'''"""Unit names and their length in seconds."""

UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
ALIASES = {
    "week": "w",
    "weeks": "w",
    "day": "d",
    "days": "d",
    "hr": "h",
    "hour": "h",
    "hours": "h",
    "min": "m",
    "mins": "m",
    "minute": "m",
    "minutes": "m",
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
}


def unit_seconds(name):
    """Seconds in one unit, by short name or alias (case-insensitive)."""
    key = name.lower()
    key = ALIASES.get(key, key)
    if key not in UNIT_SECONDS:
        raise ValueError(f"unknown unit {name!r}")
    return UNIT_SECONDS[key]
'''

_PARSE = r'''"""Parsing and formatting human durations such as '1h30m' or '2 days 4 hours'."""
from durations._units import UNIT_SECONDS, unit_seconds


def _tokens(text):
    """Split into (number, unit) pairs: '1h 30m' -> [('1', 'h'), ('30', 'm')]."""
    pairs = []
    i = 0
    n = len(text)
    while i < n:
        if text[i].isspace() or text[i] == ",":
            i += 1
            continue
        start = i
        while i < n and (text[i].isdigit() or text[i] == "."):
            i += 1
        number = text[start:i]
        if not number:
            raise ValueError(f"expected a number at position {start} in {text!r}")
        while i < n and text[i].isspace():
            i += 1
        unit_start = i
        while i < n and text[i].isalpha():
            i += 1
        unit = text[unit_start:i]
        if not unit:
            raise ValueError(f"missing unit after {number!r} in {text!r}")
        pairs.append((number, unit))
    return pairs


def parse_duration(text):
    """Total seconds of a duration; an int when it is a whole number."""
    pairs = _tokens(text)
    if not pairs:
        raise ValueError("empty duration")
    total = 0
    for number, unit in pairs:
        total += float(number) * unit_seconds(unit)
    if total == int(total):
        return int(total)
    return total


def format_duration(seconds, max_units=2):
    """'1h 30m' style: largest units first, at most max_units parts, rounded to seconds."""
    if seconds < 0:
        return "-" + format_duration(-seconds, max_units)
    remaining = int(round(seconds))
    if remaining == 0:
        return "0s"
    parts = []
    for unit, size in UNIT_SECONDS.items():
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
        if len(parts) == max_units:
            break
    return " ".join(parts)


def to_unit(seconds, unit):
    """seconds expressed in unit (a float)."""
    return seconds / unit_seconds(unit)
'''

_TESTS = r"""import pytest

from durations import format_duration, parse_duration, to_unit
from durations._units import unit_seconds


def test_parse_compact():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == 45


def test_parse_words_and_spaces():
    assert parse_duration("2 days 4 hours") == 2 * 86400 + 4 * 3600
    assert parse_duration("1 week") == 604800


def test_parse_commas():
    assert parse_duration("1w, 2d, 3s") == 604800 + 2 * 86400 + 3


def test_parse_fractions():
    assert parse_duration("1.5h") == 5400
    assert parse_duration("0.25s") == 0.25


def test_parse_returns_int_when_whole():
    assert isinstance(parse_duration("90s"), int)
    assert isinstance(parse_duration("0.5m"), int)


def test_parse_case_insensitive():
    assert parse_duration("10M") == 600
    assert parse_duration("3 Mins") == 180


def test_parse_errors():
    for bad in ("", "   ", "h", "10", "5 parsecs", "1h x"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_unit_seconds():
    assert unit_seconds("hr") == 3600
    assert unit_seconds("WEEK") == 604800
    assert unit_seconds("s") == 1
    with pytest.raises(ValueError):
        unit_seconds("fortnight")


def test_format_basic():
    assert format_duration(5400) == "1h 30m"
    assert format_duration(59) == "59s"
    assert format_duration(60) == "1m"
    assert format_duration(3600) == "1h"


def test_format_default_max_units():
    assert format_duration(90061) == "1d 1h"
    assert format_duration(3661) == "1h 1m"


def test_format_max_units():
    assert format_duration(90061, max_units=4) == "1d 1h 1m 1s"
    assert format_duration(90061, max_units=1) == "1d"
    assert format_duration(86401, max_units=3) == "1d 1s"


def test_format_zero_and_negative():
    assert format_duration(0) == "0s"
    assert format_duration(0.4) == "0s"
    assert format_duration(-90) == "-1m 30s"


def test_format_weeks():
    assert format_duration(2 * 604800 + 86400) == "2w 1d"


def test_format_rounds_to_seconds():
    assert format_duration(59.6) == "1m"


def test_roundtrip():
    for text in ["1h 30m", "2w 3d", "45s", "1d 1h", "5m 1s"]:
        assert format_duration(parse_duration(text)) == text


def test_to_unit():
    assert to_unit(5400, "h") == 1.5
    assert to_unit(120, "minutes") == 2
"""

BASE = BaseSource(
    name="durations",
    module="parse",
    summary="parsing and formatting human-readable durations such as '1h30m' or '2 days, 4 hours'",
    files={"durations/__init__.py": _INIT, "durations/_units.py": _UNITS, "durations/parse.py": _PARSE},
    tests=_TESTS,
)
