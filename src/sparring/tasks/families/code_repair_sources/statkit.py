"""Base ``statkit``: descriptive statistics over lists of numbers."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Descriptive statistics helpers."""
from statkit.stats import mean, median, mode, percentile, stdev, value_range, variance, zscores

__all__ = ["mean", "median", "mode", "percentile", "stdev", "value_range", "variance", "zscores"]
'''

_CHECKS = r'''"""Input validation shared by the statistics functions."""


def require_data(xs, minimum=1):
    """Return xs as a list of numbers; ValueError if it has fewer than minimum items."""
    data = list(xs)
    if len(data) < minimum:
        raise ValueError(f"need at least {minimum} data point(s), got {len(data)}")
    for x in data:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"not a number: {x!r}")
    return data
'''

_STATS = r'''"""Mean, median, mode, spread and percentiles of a list of numbers."""
import math

from statkit._checks import require_data


def mean(xs):
    """Arithmetic mean."""
    data = require_data(xs)
    return sum(data) / len(data)


def median(xs):
    """Middle value; the mean of the two middle values for an even count."""
    data = sorted(require_data(xs))
    n = len(data)
    mid = n // 2
    if n % 2 == 1:
        return data[mid]
    return (data[mid - 1] + data[mid]) / 2


def mode(xs):
    """Most common value; ties go to the smallest value."""
    data = require_data(xs)
    counts = {}
    for x in data:
        counts[x] = counts.get(x, 0) + 1
    best = None
    best_count = 0
    for value in sorted(counts):
        if counts[value] > best_count:
            best = value
            best_count = counts[value]
    return best


def variance(xs, sample=True):
    """Sample variance (n - 1 denominator) or, with sample=False, population variance."""
    data = require_data(xs, minimum=2 if sample else 1)
    m = mean(data)
    total = sum((x - m) ** 2 for x in data)
    return total / (len(data) - 1 if sample else len(data))


def stdev(xs, sample=True):
    """Square root of the variance."""
    return math.sqrt(variance(xs, sample=sample))


def percentile(xs, q=50):
    """Linearly interpolated percentile; q is in [0, 100]."""
    if q < 0 or q > 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    data = sorted(require_data(xs))
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    frac = pos - lo
    return data[lo] + (data[hi] - data[lo]) * frac


def value_range(xs):
    """Largest minus smallest value."""
    data = require_data(xs)
    return max(data) - min(data)


def zscores(xs):
    """Standard scores (x - mean) / stdev; all zeros when the data is constant."""
    data = require_data(xs, minimum=2)
    m = mean(data)
    s = stdev(data)
    if s == 0:
        return [0.0 for _ in data]
    return [(x - m) / s for x in data]
'''

_TESTS = r"""import math

import pytest

from statkit import mean, median, mode, percentile, stdev, value_range, variance, zscores
from statkit._checks import require_data

DATA = [2, 4, 4, 4, 5, 5, 7, 9]


def test_mean_basic():
    assert mean([1, 2, 3, 4]) == 2.5
    assert mean([7]) == 7
    assert mean([-3, 3, -6]) == -2


def test_mean_empty_raises():
    with pytest.raises(ValueError):
        mean([])


def test_median_odd():
    assert median([5, 1, 3]) == 3
    assert median([9]) == 9


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
    assert median([10, 20]) == 15


def test_median_generator():
    assert median(x for x in [10, 30, 20]) == 20


def test_mode_basic():
    assert mode([1, 2, 2, 3]) == 2
    assert mode([5]) == 5


def test_mode_tie_goes_to_smallest():
    assert mode([3, 3, 1, 1, 2]) == 1
    assert mode([4, 9, 9, 4]) == 4


def test_variance_sample():
    assert variance(DATA) == pytest.approx(32 / 7)
    assert variance([1, 3]) == pytest.approx(2.0)


def test_variance_population():
    assert variance(DATA, sample=False) == pytest.approx(4.0)
    assert variance([1], sample=False) == 0


def test_variance_sample_needs_two():
    with pytest.raises(ValueError):
        variance([1])


def test_stdev_default_is_sample():
    assert stdev([1, 2, 3, 4]) == pytest.approx(math.sqrt(5 / 3))


def test_stdev_population():
    assert stdev(DATA, sample=False) == pytest.approx(2.0)


def test_percentile_default_is_median():
    assert percentile([1, 2, 3, 4, 5]) == 3
    assert percentile([1, 2, 3, 4]) == pytest.approx(2.5)


def test_percentile_interpolates():
    xs = [40, 10, 30, 20]
    assert percentile(xs, 25) == pytest.approx(17.5)
    assert percentile(xs, 0) == 10
    assert percentile(xs, 100) == 40
    assert percentile(xs, 90) == pytest.approx(37.0)


def test_percentile_single_value():
    assert percentile([4], 90) == 4


def test_percentile_out_of_range():
    with pytest.raises(ValueError):
        percentile([1, 2], -1)
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


def test_value_range():
    assert value_range([3, -2, 8]) == 10
    assert value_range([5]) == 0


def test_zscores():
    z = zscores(DATA)
    assert sum(z) == pytest.approx(0.0, abs=1e-9)
    assert z[0] == pytest.approx((2 - 5) / math.sqrt(32 / 7))
    assert z[-1] == pytest.approx((9 - 5) / math.sqrt(32 / 7))


def test_zscores_constant_data():
    assert zscores([3, 3, 3]) == [0.0, 0.0, 0.0]


def test_rejects_non_numbers():
    with pytest.raises(TypeError):
        mean([1, "2"])
    with pytest.raises(TypeError):
        require_data([True, 2])
    assert require_data((1, 2.5)) == [1, 2.5]
"""

BASE = BaseSource(
    name="statkit",
    module="stats",
    summary="descriptive statistics: mean, median, mode, variance, standard deviation, percentiles, z-scores",
    files={"statkit/__init__.py": _INIT, "statkit/_checks.py": _CHECKS, "statkit/stats.py": _STATS},
    tests=_TESTS,
)
