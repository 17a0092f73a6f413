"""Base ``searchkit``: binary search and bisection helpers over sorted sequences."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Binary search, bounds, counting and nearest-value lookups on sorted sequences."""
from searchkit.search import (
    binary_search,
    count_in_range,
    insert_sorted,
    lower_bound,
    nearest,
    search_checked,
    upper_bound,
)

__all__ = [
    "binary_search",
    "count_in_range",
    "insert_sorted",
    "lower_bound",
    "nearest",
    "search_checked",
    "upper_bound",
]
'''

_ORDER = r'''"""Checks on sorted sequences."""


def is_sorted(xs, key=None):
    """Whether xs is in ascending order (by key, if given)."""
    k = key if key is not None else (lambda x: x)
    for i in range(1, len(xs)):
        if k(xs[i - 1]) > k(xs[i]):
            return False
    return True


def require_sorted(xs):
    """ValueError unless xs is sorted ascending."""
    if not is_sorted(xs):
        raise ValueError("sequence must be sorted ascending")
'''

_SEARCH = r'''"""Binary search and bisection over sorted sequences."""
from searchkit._order import require_sorted


def lower_bound(xs, target, lo=0, hi=None):
    """First index i in [lo, hi) with xs[i] >= target (hi if there is none)."""
    if hi is None:
        hi = len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if xs[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def upper_bound(xs, target, lo=0, hi=None):
    """First index i in [lo, hi) with xs[i] > target (hi if there is none)."""
    if hi is None:
        hi = len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if xs[mid] <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def binary_search(xs, target):
    """Index of the first occurrence of target in xs, or -1."""
    i = lower_bound(xs, target)
    if i < len(xs) and xs[i] == target:
        return i
    return -1


def count_in_range(xs, low, high):
    """Number of items x with low <= x <= high."""
    if low > high:
        return 0
    return upper_bound(xs, high) - lower_bound(xs, low)


def insert_sorted(xs, item):
    """A new list with item inserted after any equal items."""
    out = list(xs)
    out.insert(upper_bound(out, item), item)
    return out


def nearest(xs, target):
    """The item closest to target; ties go to the smaller item."""
    require_sorted(xs)
    if not xs:
        raise ValueError("nearest() of an empty sequence")
    i = lower_bound(xs, target)
    if i == 0:
        return xs[0]
    if i == len(xs):
        return xs[-1]
    before = xs[i - 1]
    after = xs[i]
    if target - before <= after - target:
        return before
    return after


def search_checked(xs, target):
    """binary_search after checking that xs is sorted."""
    require_sorted(xs)
    return binary_search(xs, target)
'''

_TESTS = r"""import pytest

from searchkit import (
    binary_search,
    count_in_range,
    insert_sorted,
    lower_bound,
    nearest,
    search_checked,
    upper_bound,
)
from searchkit._order import is_sorted

XS = [1, 2, 2, 2, 5, 8]


def test_lower_bound():
    assert lower_bound(XS, 2) == 1
    assert lower_bound(XS, 0) == 0
    assert lower_bound(XS, 3) == 4
    assert lower_bound(XS, 8) == 5
    assert lower_bound(XS, 9) == 6


def test_upper_bound():
    assert upper_bound(XS, 2) == 4
    assert upper_bound(XS, 0) == 0
    assert upper_bound(XS, 5) == 5
    assert upper_bound(XS, 8) == 6


def test_bounds_with_explicit_range():
    assert lower_bound(XS, 2, lo=2) == 2
    assert upper_bound(XS, 8, hi=4) == 4
    assert lower_bound(XS, 5, 1, 3) == 3


def test_bounds_empty():
    assert lower_bound([], 3) == 0
    assert upper_bound([], 3) == 0


def test_binary_search_found():
    ys = [3, 6, 9, 12, 15]
    for i, y in enumerate(ys):
        assert binary_search(ys, y) == i


def test_binary_search_missing():
    ys = [3, 6, 9, 12, 15]
    for y in (0, 7, 16):
        assert binary_search(ys, y) == -1
    assert binary_search([], 1) == -1


def test_binary_search_duplicates_first():
    assert binary_search([1, 1, 1, 2], 1) == 0
    assert binary_search(XS, 2) == 1


def test_count_in_range():
    ys = [1, 2, 2, 3, 5, 8, 8, 9]
    assert count_in_range(ys, 2, 8) == 6
    assert count_in_range(ys, 4, 4) == 0
    assert count_in_range(ys, 8, 8) == 2
    assert count_in_range(ys, 0, 100) == 8


def test_count_in_empty_range():
    assert count_in_range([1, 2, 3], 3, 1) == 0


def test_insert_sorted():
    assert insert_sorted([1, 3, 5], 4) == [1, 3, 4, 5]
    assert insert_sorted([], 1) == [1]
    assert insert_sorted([1, 2], 0) == [0, 1, 2]
    assert insert_sorted([1, 2], 9) == [1, 2, 9]


def test_insert_sorted_after_equal_and_copies():
    xs = [1, 2, 3]
    out = insert_sorted(xs, 2.0)
    assert out == [1, 2, 2, 3]
    assert isinstance(out[1], int) and isinstance(out[2], float)
    assert xs == [1, 2, 3]


def test_nearest():
    ys = [1, 4, 9, 16]
    assert nearest(ys, 5) == 4
    assert nearest(ys, 7) == 9
    assert nearest(ys, 9) == 9
    assert nearest(ys, -10) == 1
    assert nearest(ys, 100) == 16


def test_nearest_tie_goes_to_smaller():
    assert nearest([1, 4, 9, 16], 6.5) == 4
    assert nearest([0, 2], 1) == 0


def test_nearest_errors():
    with pytest.raises(ValueError):
        nearest([], 1)
    with pytest.raises(ValueError):
        nearest([3, 1], 2)


def test_is_sorted():
    assert is_sorted([])
    assert is_sorted([1, 1, 2])
    assert not is_sorted([2, 1])
    assert is_sorted(["a", "bb", "ccc"], key=len)
    assert not is_sorted(["ccc", "a"], key=len)


def test_search_checked():
    assert search_checked([1, 2, 3], 3) == 2
    with pytest.raises(ValueError):
        search_checked([3, 2, 1], 3)
"""

BASE = BaseSource(
    name="searchkit",
    module="search",
    summary="binary search, lower/upper bounds, range counts and nearest-value lookups on sorted sequences",
    files={"searchkit/__init__.py": _INIT, "searchkit/_order.py": _ORDER, "searchkit/search.py": _SEARCH},
    tests=_TESTS,
)
