"""Base ``jpath``: reading and writing nested JSON-like data by dotted path."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Paths such as 'users[0].name' into nested dicts and lists."""
from jpath.path import flatten, get, has, set_path

__all__ = ["flatten", "get", "has", "set_path"]
'''

_PARSE = r'''"""Tokenising path expressions such as 'a.b[0].c'."""


def parse_path(path):
    """'users[0].name' -> ['users', 0, 'name']; '' -> [] (the root)."""
    tokens = []
    key = ""
    i = 0
    n = len(path)
    while i < n:
        ch = path[i]
        if ch == ".":
            if key:
                tokens.append(key)
                key = ""
            elif i == 0 or path[i - 1] != "]":
                raise ValueError(f"empty key at position {i} in {path!r}")
            i += 1
        elif ch == "[":
            if key:
                tokens.append(key)
                key = ""
            close = path.find("]", i)
            if close == -1:
                raise ValueError(f"unclosed '[' at position {i} in {path!r}")
            tokens.append(parse_index(path[i + 1:close], path))
            i = close + 1
        else:
            key = key + ch
            i += 1
    if key:
        tokens.append(key)
    elif path.endswith("."):
        raise ValueError(f"path ends with '.': {path!r}")
    return tokens


def parse_index(inner, path):
    """The integer inside '[...]'; negative indices count from the end."""
    text = inner.strip()
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    if not digits.isdigit():
        raise ValueError(f"bad index {inner!r} in {path!r}")
    value = int(digits)
    return -value if negative else value
'''

_PATH = r'''"""Reading and writing nested dict/list data by path."""
from jpath._parse import parse_path

_MISSING = object()


def _step(node, token):
    """node[token] if it exists (ints index lists, strings key dicts), else _MISSING."""
    if isinstance(token, int):
        if not isinstance(node, list):
            return _MISSING
        if -len(node) <= token < len(node):
            return node[token]
        return _MISSING
    if isinstance(node, dict) and token in node:
        return node[token]
    return _MISSING


def get(data, path, default=None):
    """The value at path, or default if any step is missing."""
    node = data
    for token in parse_path(path):
        node = _step(node, token)
        if node is _MISSING:
            return default
    return node


def has(data, path):
    """Whether a value (possibly None) exists at path."""
    return get(data, path, _MISSING) is not _MISSING


def set_path(data, path, value):
    """Set the value at path in place, creating missing dicts along the way; returns data."""
    tokens = parse_path(path)
    if not tokens:
        raise ValueError("cannot set the root")
    node = data
    for token, following in zip(tokens, tokens[1:]):
        child = _step(node, token)
        if child is _MISSING:
            if isinstance(token, int) or isinstance(following, int):
                raise IndexError(f"cannot create list items along {path!r}")
            child = {}
            node[token] = child
        node = child
    last = tokens[-1]
    if isinstance(last, int) and (not isinstance(node, list) or not -len(node) <= last < len(node)):
        raise IndexError(f"index {last} out of range in {path!r}")
    node[last] = value
    return data


def flatten(data, prefix=""):
    """{'a': {'b': 1}, 'c': [2]} -> {'a.b': 1, 'c[0]': 2}; empty containers are leaves."""
    out = {}
    if isinstance(data, dict) and data:
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else key))
    elif isinstance(data, list) and data:
        for i, value in enumerate(data):
            out.update(flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix] = data
    return out
'''

_TESTS = r"""import pytest

from jpath import flatten, get, has, set_path
from jpath._parse import parse_index, parse_path

DATA = {
    "users": [{"name": "ann", "tags": ["a", "b"]}, {"name": "bob", "age": 0}],
    "meta": {"count": 2, "next": None},
}


def test_parse_path():
    assert parse_path("a.b[0].c") == ["a", "b", 0, "c"]
    assert parse_path("[2][-1]") == [2, -1]
    assert parse_path("x") == ["x"]
    assert parse_path("") == []


def test_parse_path_errors():
    for bad in ("a..b", ".a", "a.", "a[1", "a[x]", "a[]"):
        with pytest.raises(ValueError):
            parse_path(bad)


def test_parse_index():
    assert parse_index("3", "p") == 3
    assert parse_index(" -2 ", "p") == -2
    with pytest.raises(ValueError):
        parse_index("-", "p")


def test_get_nested():
    assert get(DATA, "users[0].name") == "ann"
    assert get(DATA, "users[1].age") == 0
    assert get(DATA, "meta.count") == 2


def test_get_negative_index():
    assert get(DATA, "users[-1].name") == "bob"
    assert get(DATA, "users[0].tags[-2]") == "a"


def test_get_missing_returns_default():
    assert get(DATA, "users[2].name") is None
    assert get(DATA, "users[-3]") is None
    assert get(DATA, "meta.nope", "x") == "x"


def test_get_none_value_is_not_missing():
    assert get(DATA, "meta.next", "default") is None


def test_get_type_mismatch():
    assert get(DATA, "meta[0]") is None
    assert get(DATA, "users.name") is None


def test_get_root():
    assert get(DATA, "") is DATA


def test_has():
    assert has(DATA, "meta.next")
    assert not has(DATA, "meta.prev")
    assert has(DATA, "users[1]")
    assert not has(DATA, "users[2]")


def test_set_path_existing():
    d = {"a": {"b": 1}}
    assert set_path(d, "a.b", 2) == {"a": {"b": 2}}


def test_set_path_creates_dicts():
    assert set_path({}, "x.y.z", 1) == {"x": {"y": {"z": 1}}}
    assert set_path({"x": {"k": 0}}, "x.y", 1) == {"x": {"k": 0, "y": 1}}


def test_set_path_list_items():
    d = {"xs": [1, 2, 3]}
    set_path(d, "xs[-1]", 9)
    set_path(d, "xs[0]", 7)
    assert d == {"xs": [7, 2, 9]}
    with pytest.raises(IndexError):
        set_path(d, "xs[3]", 0)


def test_set_path_errors():
    with pytest.raises(ValueError):
        set_path({}, "", 1)
    with pytest.raises(IndexError):
        set_path({}, "a[0]", 1)


def test_flatten():
    data = {"a": {"b": 1}, "c": [2, {"d": 3}], "e": {}}
    assert flatten(data) == {"a.b": 1, "c[0]": 2, "c[1].d": 3, "e": {}}


def test_flatten_agrees_with_get():
    flat = flatten(DATA)
    assert len(flat) == 7
    for path, value in flat.items():
        assert get(DATA, path, "missing") == value
"""

BASE = BaseSource(
    name="jpath",
    module="path",
    summary="reading and writing nested JSON-like data by paths such as 'users[0].name'",
    files={"jpath/__init__.py": _INIT, "jpath/_parse.py": _PARSE, "jpath/path.py": _PATH},
    tests=_TESTS,
)
