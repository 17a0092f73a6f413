"""Base ``wordwrap``: greedy word wrapping, justification and shortening."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Word wrapping, filling, justification and shortening of plain text."""
from wordwrap.wrap import fill, justify, justify_text, shorten, wrap

__all__ = ["fill", "justify", "justify_text", "shorten", "wrap"]
'''

_TOKENS = r'''"""Splitting text into words and words into pieces."""


def split_words(text):
    """Whitespace-separated words, in order."""
    words = []
    current = []
    for ch in text:
        if ch.isspace():
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


def chunks(word, width):
    """Split word into pieces of at most width characters."""
    return [word[i:i + width] for i in range(0, len(word), width)]
'''

_WRAP = r'''"""Greedy word wrapping, filling, justification and shortening."""
from wordwrap._tokens import chunks, split_words


def wrap(text, width=20, break_long=True):
    """Lines of at most width characters (words longer than width are split if break_long)."""
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    lines = []
    line = ""
    for word in split_words(text):
        pieces = chunks(word, width) if break_long and len(word) > width else [word]
        for piece in pieces:
            if not line:
                line = piece
            elif len(line) + 1 + len(piece) <= width:
                line = f"{line} {piece}"
            else:
                lines.append(line)
                line = piece
    if line:
        lines.append(line)
    return lines


def fill(text, width=20):
    """wrap() joined with newlines."""
    return "\n".join(wrap(text, width))


def justify(line, width):
    """Pad the gaps between words so the line is exactly width characters long.

    Extra spaces go to the leftmost gaps; a single word is padded on the right.
    """
    words = line.split()
    if len(words) < 2:
        return line.ljust(width)
    gaps = len(words) - 1
    spaces = width - sum(len(w) for w in words)
    if spaces < gaps:
        raise ValueError(f"{line!r} does not fit in {width} characters")
    base, extra = divmod(spaces, gaps)
    out = [words[0]]
    for i, word in enumerate(words[1:]):
        pad = base + (1 if i < extra else 0)
        out.append(" " * pad)
        out.append(word)
    return "".join(out)


def justify_text(text, width=20):
    """Wrap text and justify every line but the last."""
    lines = wrap(text, width)
    if not lines:
        return ""
    body = [justify(line, width) for line in lines[:-1]]
    return "\n".join(body + [lines[-1]])


def shorten(text, width, placeholder="..."):
    """Collapse whitespace and, if still longer than width, cut at a word and add placeholder."""
    words = split_words(text)
    joined = " ".join(words)
    if len(joined) <= width:
        return joined
    keep = []
    size = 0
    for word in words:
        extra = len(word) + (1 if keep else 0)
        if size + extra + len(placeholder) > width:
            break
        keep.append(word)
        size += extra
    return " ".join(keep) + placeholder
'''

_TESTS = r"""import pytest

from wordwrap import fill, justify, justify_text, shorten, wrap
from wordwrap._tokens import chunks, split_words


def test_split_words():
    assert split_words("  hello   world\tand\nmore ") == ["hello", "world", "and", "more"]
    assert split_words("") == []


def test_chunks():
    assert chunks("abcdefg", 3) == ["abc", "def", "g"]
    assert chunks("ab", 5) == ["ab"]


def test_wrap_basic():
    text = "the quick brown fox jumps over the lazy dog"
    assert wrap(text, 10) == ["the quick", "brown fox", "jumps over", "the lazy", "dog"]


def test_wrap_default_width():
    assert wrap("xxxxxxxxx yyyyyyyyyy z") == ["xxxxxxxxx yyyyyyyyyy", "z"]
    assert wrap("xxxxxxxxxx yyyyyyyyyy") == ["xxxxxxxxxx", "yyyyyyyyyy"]


def test_wrap_long_word_broken():
    assert wrap("abcdefghij xy", 4) == ["abcd", "efgh", "ij", "xy"]


def test_wrap_long_word_kept():
    assert wrap("abcdefghij xy", 4, break_long=False) == ["abcdefghij", "xy"]


def test_wrap_empty():
    assert wrap("") == []
    assert wrap("   \n ") == []


def test_wrap_bad_width():
    with pytest.raises(ValueError):
        wrap("abc", 0)


def test_fill():
    assert fill("one two three four", 9) == "one two\nthree\nfour"
    assert fill("a b c", 3) == "a b\nc"


def test_justify():
    assert justify("a bb ccc", 12) == "a   bb   ccc"
    assert justify("a b c", 8) == "a   b  c"


def test_justify_single_word():
    assert justify("word", 6) == "word  "


def test_justify_too_narrow():
    with pytest.raises(ValueError):
        justify("aaa bbb", 6)


def test_justify_text():
    assert justify_text("the quick brown fox", 10) == "the  quick\nbrown fox"
    assert justify_text("", 10) == ""


def test_shorten_fits():
    assert shorten("hello world", 20) == "hello world"
    assert shorten("  hello   world ", 11) == "hello world"


def test_shorten_cuts_at_words():
    assert shorten("the quick brown fox", 12) == "the quick..."
    assert shorten("hello world", 10) == "hello..."
    assert shorten("hello world", 10, placeholder=" [..]") == "hello [..]"
"""

BASE = BaseSource(
    name="wordwrap",
    module="wrap",
    summary="greedy word wrapping, filling, justification and shortening of plain text",
    files={"wordwrap/__init__.py": _INIT, "wordwrap/_tokens.py": _TOKENS, "wordwrap/wrap.py": _WRAP},
    tests=_TESTS,
)
