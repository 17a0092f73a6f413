"""Base ``numerals``: conversion between integers and Roman numerals."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Roman numerals for 1..3999."""
from numerals.roman import add_roman, from_roman, is_roman, to_roman

__all__ = ["add_roman", "from_roman", "is_roman", "to_roman"]
'''

_TABLES = r'''"""Symbol tables for Roman numerals."""

PAIRS = (
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
)
SYMBOLS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
MAX_VALUE = 3999
'''

_ROMAN = r'''"""Conversion between integers and canonical Roman numerals (1..3999)."""
from numerals._tables import MAX_VALUE, PAIRS, SYMBOLS


def to_roman(n):
    """The canonical numeral of n: 1994 -> 'MCMXCIV'."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"expected an int, got {type(n).__name__}")
    if n < 1 or n > MAX_VALUE:
        raise ValueError(f"{n} is outside 1..{MAX_VALUE}")
    parts = []
    for value, symbol in PAIRS:
        count, n = divmod(n, value)
        parts.append(symbol * count)
    return "".join(parts)


def from_roman(text):
    """The value of a canonical numeral (case and surrounding space ignored)."""
    s = text.strip().upper()
    if not s:
        raise ValueError("empty numeral")
    total = 0
    for i, ch in enumerate(s):
        if ch not in SYMBOLS:
            raise ValueError(f"not a Roman digit: {ch!r}")
        value = SYMBOLS[ch]
        if i + 1 < len(s) and SYMBOLS.get(s[i + 1], 0) > value:
            total -= value
        else:
            total += value
    if total < 1 or total > MAX_VALUE or to_roman(total) != s:
        raise ValueError(f"not a canonical numeral: {text!r}")
    return total


def is_roman(text):
    """Whether text is a canonical numeral."""
    try:
        from_roman(text)
    except ValueError:
        return False
    return True


def add_roman(a, b):
    """Sum of two numerals, as a numeral."""
    return to_roman(from_roman(a) + from_roman(b))
'''

_TESTS = r"""import pytest

from numerals import add_roman, from_roman, is_roman, to_roman
from numerals._tables import PAIRS, SYMBOLS


def test_to_roman_one_to_ten():
    expected = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X"]
    assert [to_roman(i) for i in range(1, 11)] == expected


def test_to_roman_examples():
    assert to_roman(14) == "XIV"
    assert to_roman(40) == "XL"
    assert to_roman(90) == "XC"
    assert to_roman(400) == "CD"
    assert to_roman(944) == "CMXLIV"
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(2024) == "MMXXIV"


def test_to_roman_limits():
    assert to_roman(1) == "I"
    assert to_roman(3999) == "MMMCMXCIX"


def test_to_roman_out_of_range():
    for n in (0, 4000, -5):
        with pytest.raises(ValueError):
            to_roman(n)


def test_to_roman_type_errors():
    for bad in (2.0, True, "5"):
        with pytest.raises(TypeError):
            to_roman(bad)


def test_from_roman_examples():
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("xiv") == 14
    assert from_roman(" LVIII ") == 58
    assert from_roman("MMMCMXCIX") == 3999


def test_from_roman_subtractive():
    cases = {"IV": 4, "IX": 9, "XL": 40, "XC": 90, "CD": 400, "CM": 900}
    for text, value in cases.items():
        assert from_roman(text) == value


def test_from_roman_invalid_character():
    with pytest.raises(ValueError):
        from_roman("ABC")


def test_from_roman_empty():
    for text in ("", "   "):
        with pytest.raises(ValueError):
            from_roman(text)


def test_from_roman_non_canonical():
    for text in ("IIII", "VV", "IC", "MMMM"):
        with pytest.raises(ValueError):
            from_roman(text)


def test_roundtrip_every_value():
    assert all(from_roman(to_roman(i)) == i for i in range(1, 4000))


def test_is_roman():
    assert is_roman("XLII")
    assert not is_roman("XLIIII")
    assert not is_roman("")


def test_add_roman():
    assert add_roman("XIV", "XXVIII") == "XLII"
    assert add_roman("MM", "MCMXCIX") == "MMMCMXCIX"


def test_tables_consistent():
    assert [v for v, _ in PAIRS] == sorted((v for v, _ in PAIRS), reverse=True)
    assert all(SYMBOLS[s] == v for v, s in PAIRS if len(s) == 1)
"""

BASE = BaseSource(
    name="numerals",
    module="roman",
    summary="conversion between integers 1..3999 and canonical Roman numerals",
    files={"numerals/__init__.py": _INIT, "numerals/_tables.py": _TABLES, "numerals/roman.py": _ROMAN},
    tests=_TESTS,
)
