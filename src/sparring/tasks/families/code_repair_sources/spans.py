"""Base ``spans``: merging, measuring and intersecting closed intervals."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Closed numeric intervals: merge, measure, intersect, find gaps."""
from spans.intervals import contains, gaps, intersect, merge, total_length

__all__ = ["contains", "gaps", "intersect", "merge", "total_length"]
'''

_NORMALIZE = r'''"""Validation and normalisation of (start, end) pairs."""


def normalize(interval):
    """Return (start, end) with start <= end; ValueError unless it is a pair."""
    if len(interval) != 2:
        raise ValueError(f"an interval has two endpoints, got {interval!r}")
    start, end = interval
    if start > end:
        start, end = end, start
    return (start, end)


def normalize_all(intervals):
    """Every interval normalised, sorted by start then end."""
    return sorted(normalize(iv) for iv in intervals)
'''

_INTERVALS = r'''"""Merging, measuring and intersecting closed intervals [start, end]."""
from spans._normalize import normalize_all


def merge(intervals, touching=True):
    """Merge overlapping intervals; with touching=True, [1, 2] and [2, 3] merge too."""
    items = normalize_all(intervals)
    if not items:
        return []
    merged = [items[0]]
    for start, end in items[1:]:
        last_start, last_end = merged[-1]
        if start < last_end or (touching and start == last_end):
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


def total_length(intervals):
    """Total length covered by the intervals, overlaps counted once."""
    return sum(end - start for start, end in merge(intervals))


def contains(intervals, point):
    """Whether any interval contains point (endpoints included)."""
    for start, end in merge(intervals):
        if start <= point <= end:
            return True
    return False


def intersect(a, b):
    """Intersection of two interval lists, as a merged list."""
    left = merge(a)
    right = merge(b)
    out = []
    i = 0
    j = 0
    while i < len(left) and j < len(right):
        start = max(left[i][0], right[j][0])
        end = min(left[i][1], right[j][1])
        if start <= end:
            out.append((start, end))
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return merge(out)


def gaps(intervals, lo, hi):
    """The parts of [lo, hi] not covered by any interval, in order."""
    out = []
    cursor = lo
    for start, end in merge(intervals):
        if end < lo or start > hi:
            continue
        if start > cursor:
            out.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < hi:
        out.append((cursor, hi))
    return out
'''

_TESTS = r"""import pytest

from spans import contains, gaps, intersect, merge, total_length
from spans._normalize import normalize, normalize_all


def test_merge_overlapping():
    assert merge([(1, 3), (2, 6), (8, 10), (15, 18)]) == [(1, 6), (8, 10), (15, 18)]


def test_merge_unsorted_input():
    assert merge([(8, 10), (1, 3), (2, 4)]) == [(1, 4), (8, 10)]


def test_merge_touching_by_default():
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]
    assert merge([(5, 6), (1, 2), (2, 5)]) == [(1, 6)]


def test_merge_touching_disabled():
    assert merge([(1, 2), (2, 3)], touching=False) == [(1, 2), (2, 3)]
    assert merge([(1, 3), (2, 4)], touching=False) == [(1, 4)]


def test_merge_contained():
    assert merge([(1, 10), (2, 3), (4, 5)]) == [(1, 10)]


def test_merge_empty_and_single():
    assert merge([]) == []
    assert merge([(4, 4)]) == [(4, 4)]


def test_merge_reversed_endpoints():
    assert merge([(5, 1), (6, 7)]) == [(1, 5), (6, 7)]


def test_normalize():
    assert normalize((3, 1)) == (1, 3)
    assert normalize([2, 9]) == (2, 9)
    assert normalize_all([(5, 4), (1, 2)]) == [(1, 2), (4, 5)]
    with pytest.raises(ValueError):
        normalize((1, 2, 3))


def test_total_length():
    assert total_length([(1, 3), (2, 6), (10, 11)]) == 6
    assert total_length([(0, 1), (1, 2)]) == 2


def test_total_length_empty():
    assert total_length([]) == 0


def test_contains():
    ivs = [(1, 3), (5, 8)]
    assert contains(ivs, 3)
    assert contains(ivs, 5)
    assert not contains(ivs, 4)
    assert not contains(ivs, 0)
    assert not contains(ivs, 9)


def test_intersect_basic():
    assert intersect([(0, 2), (5, 10)], [(1, 5), (8, 12)]) == [(1, 2), (5, 5), (8, 10)]


def test_intersect_nested_and_disjoint():
    assert intersect([(0, 10)], [(2, 3), (4, 6)]) == [(2, 3), (4, 6)]
    assert intersect([(0, 1)], [(2, 3)]) == []
    assert intersect([], [(2, 3)]) == []


def test_gaps_basic():
    assert gaps([(2, 4), (6, 7)], 0, 10) == [(0, 2), (4, 6), (7, 10)]


def test_gaps_fully_covered():
    assert gaps([(0, 10)], 2, 8) == []


def test_gaps_outside_intervals_ignored():
    assert gaps([(-5, -1), (20, 30)], 0, 10) == [(0, 10)]


def test_gaps_overlapping_edges():
    assert gaps([(-3, 2)], 0, 5) == [(2, 5)]
    assert gaps([(3, 9)], 0, 5) == [(0, 3)]
"""

BASE = BaseSource(
    name="spans",
    module="intervals",
    summary="closed intervals: merging overlaps, total length, membership, intersection and gaps",
    files={"spans/__init__.py": _INIT, "spans/_normalize.py": _NORMALIZE, "spans/intervals.py": _INTERVALS},
    tests=_TESTS,
)
