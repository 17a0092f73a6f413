"""Base ``runlength``: run-length encoding of sequences and its compact text form."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Run-length encoding: pairs and the compact '3ab2c' text form."""
from runlength.codec import compression_ratio, decode, encode, from_text, to_text

__all__ = ["compression_ratio", "decode", "encode", "from_text", "to_text"]
'''

_SCAN = r'''"""Low-level scanning helpers for the run-length formats."""


def read_number(text, pos):
    """Read the decimal number starting at pos; returns (value, next position).

    A missing number counts as 1 and consumes nothing.
    """
    end = pos
    while end < len(text) and text[end].isdigit():
        end += 1
    if end == pos:
        return 1, pos
    return int(text[pos:end]), end


def runs(seq):
    """Group equal neighbours: 'aab' -> [('a', 2), ('b', 1)]."""
    out = []
    for item in seq:
        if out and out[-1][0] == item:
            out[-1] = (item, out[-1][1] + 1)
        else:
            out.append((item, 1))
    return out
'''

_CODEC = r'''"""Run-length encoding of strings and sequences, and its compact text form."""
from runlength._scan import read_number, runs


def encode(seq):
    """[(item, count), ...] for the runs of equal neighbours in seq."""
    return runs(seq)


def decode(pairs):
    """Inverse of encode, as a list; a zero count contributes nothing."""
    out = []
    for item, count in pairs:
        if count < 0:
            raise ValueError(f"negative run length {count} for {item!r}")
        out.extend([item] * count)
    return out


def to_text(s, min_run=2):
    """'aaabcc' -> '3ab2c': runs shorter than min_run are written out without a count."""
    parts = []
    for ch, count in runs(s):
        if ch.isdigit():
            raise ValueError(f"digits cannot be encoded: {ch!r}")
        if count >= min_run:
            parts.append(f"{count}{ch}")
        else:
            parts.append(ch * count)
    return "".join(parts)


def from_text(text):
    """Inverse of to_text: '3ab2c' -> 'aaabcc'."""
    out = []
    pos = 0
    while pos < len(text):
        count, pos = read_number(text, pos)
        if pos >= len(text):
            raise ValueError("text ends with a count but no character")
        out.append(text[pos] * count)
        pos += 1
    return "".join(out)


def compression_ratio(s):
    """len(to_text(s)) / len(s); 1.0 for the empty string."""
    if not s:
        return 1.0
    return len(to_text(s)) / len(s)
'''

_TESTS = r"""import pytest

from runlength import compression_ratio, decode, encode, from_text, to_text
from runlength._scan import read_number, runs


def test_encode_string():
    assert encode("aaabcc") == [("a", 3), ("b", 1), ("c", 2)]


def test_encode_list():
    assert encode([1, 1, 2, 2, 2, 1]) == [(1, 2), (2, 3), (1, 1)]


def test_encode_empty():
    assert encode("") == []
    assert runs([]) == []


def test_decode_roundtrip():
    assert decode(encode("mississippi")) == list("mississippi")
    assert decode(encode([0, 0, 0])) == [0, 0, 0]


def test_decode_zero_count():
    assert decode([("x", 0), ("y", 2)]) == ["y", "y"]


def test_decode_negative_raises():
    with pytest.raises(ValueError):
        decode([("x", -1)])


def test_to_text_basic():
    assert to_text("aaabcc") == "3ab2c"
    assert to_text("abc") == "abc"


def test_to_text_min_run():
    assert to_text("aaabcc", min_run=3) == "3abcc"
    assert to_text("aab", min_run=1) == "2a1b"


def test_to_text_rejects_digits():
    with pytest.raises(ValueError):
        to_text("a1")


def test_from_text_basic():
    assert from_text("3ab2c") == "aaabcc"
    assert from_text("") == ""


def test_from_text_multi_digit():
    assert from_text("12x") == "x" * 12
    assert from_text("a10b") == "a" + "b" * 10


def test_from_text_trailing_count_raises():
    with pytest.raises(ValueError):
        from_text("ab3")


def test_text_roundtrip():
    for s in ["", "a", "zzzzzzzzzzzz", "abcabc", "aabbbaa", "xy" * 5]:
        assert from_text(to_text(s)) == s


def test_read_number():
    assert read_number("42x", 0) == (42, 2)
    assert read_number("x", 0) == (1, 0)
    assert read_number("a7b", 1) == (7, 2)
    assert read_number("a", 1) == (1, 1)


def test_compression_ratio():
    assert compression_ratio("") == 1.0
    assert compression_ratio("aaaa") == 0.5
    assert compression_ratio("abcd") == 1.0
"""

BASE = BaseSource(
    name="runlength",
    module="codec",
    summary="run-length encoding of sequences and its compact text form such as '3ab2c'",
    files={"runlength/__init__.py": _INIT, "runlength/_scan.py": _SCAN, "runlength/codec.py": _CODEC},
    tests=_TESTS,
)
