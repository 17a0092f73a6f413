"""Base ``cachebox``: a least-recently-used cache and a memoizing decorator."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""An LRU cache with hit/miss statistics, and a memoize decorator built on it."""
from cachebox.lru import LRUCache, memoize

__all__ = ["LRUCache", "memoize"]
'''

_STATS = r'''"""Hit, miss and eviction accounting for caches."""


class CacheStats:
    """Counters of one cache's lookups and evictions."""

    def __init__(self):
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def record(self, hit):
        """Count one lookup."""
        if hit:
            self.hits += 1
        else:
            self.misses += 1

    @property
    def lookups(self):
        return self.hits + self.misses

    def hit_ratio(self):
        """Hits per lookup; 0.0 before the first lookup."""
        if self.lookups == 0:
            return 0.0
        return self.hits / self.lookups

    def as_dict(self):
        return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions}
'''

_LRU = r'''"""A least-recently-used cache with a fixed capacity."""
from collections import OrderedDict

from cachebox._stats import CacheStats

_MISSING = object()


class LRUCache:
    """Maps keys to values, evicting the least recently used entry when full."""

    def __init__(self, capacity=128):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._data = OrderedDict()
        self.stats = CacheStats()

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        """Membership test; does not count as a use."""
        return key in self._data

    def get(self, key, default=None):
        """The value of key (marking it most recently used), or default."""
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            self.stats.record(False)
            return default
        self._data.move_to_end(key)
        self.stats.record(True)
        return value

    def put(self, key, value):
        """Insert or update key, making it the most recently used."""
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        self._evict(self.capacity)

    def pop(self, key, default=None):
        """Remove key and return its value, or default."""
        return self._data.pop(key, default)

    def keys(self):
        """Keys from least to most recently used."""
        return list(self._data)

    def resize(self, capacity):
        """Change the capacity, evicting the least recently used entries if needed."""
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._evict(capacity)

    def _evict(self, limit):
        while len(self._data) > limit:
            self._data.popitem(last=False)
            self.stats.evictions += 1


def memoize(capacity=32):
    """Decorator caching a function's results by positional arguments."""

    def decorator(fn):
        cache = LRUCache(capacity)

        def wrapper(*args):
            value = cache.get(args, _MISSING)
            if value is _MISSING:
                value = fn(*args)
                cache.put(args, value)
            return value

        wrapper.cache = cache
        return wrapper

    return decorator
'''

_TESTS = r"""import pytest

from cachebox import LRUCache, memoize
from cachebox._stats import CacheStats


def test_put_and_get():
    c = LRUCache(4)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1
    assert c.get("b") == 2
    assert len(c) == 2


def test_get_missing_returns_default():
    c = LRUCache(2)
    assert c.get("x") is None
    assert c.get("x", 5) == 5


def test_evicts_least_recently_inserted():
    c = LRUCache(2)
    for k in "abc":
        c.put(k, k.upper())
    assert "a" not in c
    assert c.keys() == ["b", "c"]


def test_get_refreshes_recency():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    c.put("c", 3)
    assert c.keys() == ["a", "c"]


def test_put_existing_updates_and_refreshes():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    c.put("c", 3)
    assert c.get("a") == 10
    assert "b" not in c
    assert len(c) == 2


def test_contains_does_not_refresh():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert "a" in c
    c.put("c", 3)
    assert "a" not in c


def test_capacity_one():
    c = LRUCache(1)
    c.put("a", 1)
    c.put("b", 2)
    assert c.keys() == ["b"]
    assert c.stats.evictions == 1


def test_capacity_validation():
    for bad in (0, -3):
        with pytest.raises(ValueError):
            LRUCache(bad)


def test_default_capacity():
    c = LRUCache()
    for i in range(130):
        c.put(i, i * i)
    assert len(c) == 128
    assert 1 not in c
    assert 2 in c
    assert c.get(129) == 129 * 129


def test_stats_counts():
    c = LRUCache(2)
    c.put("a", 1)
    c.get("a")
    c.get("a")
    c.get("zzz")
    c.put("b", 2)
    c.put("c", 3)
    assert c.stats.as_dict() == {"hits": 2, "misses": 1, "evictions": 1}
    assert c.stats.hit_ratio() == pytest.approx(2 / 3)


def test_hit_ratio_before_lookups():
    assert CacheStats().hit_ratio() == 0.0
    assert CacheStats().lookups == 0


def test_pop():
    c = LRUCache(3)
    c.put("a", 1)
    assert c.pop("a") == 1
    assert c.pop("a", "gone") == "gone"
    assert len(c) == 0


def test_resize_shrinks_oldest_first():
    c = LRUCache(4)
    for k in "abcd":
        c.put(k, k)
    c.get("a")
    c.resize(2)
    assert c.keys() == ["d", "a"]
    assert c.stats.evictions == 2
    with pytest.raises(ValueError):
        c.resize(0)


def test_memoize_calls_once_per_argument():
    calls = []

    @memoize(8)
    def square(x):
        calls.append(x)
        return x * x

    assert [square(3), square(3), square(4), square(3)] == [9, 9, 16, 9]
    assert calls == [3, 4]


def test_memoize_default_capacity():
    @memoize()
    def ident(x):
        return x

    for i in range(40):
        ident(i)
    assert len(ident.cache) == 32
    assert (7,) not in ident.cache
    assert (8,) in ident.cache
"""

BASE = BaseSource(
    name="cachebox",
    module="lru",
    summary="a least-recently-used cache with hit/miss statistics and a memoize decorator",
    files={"cachebox/__init__.py": _INIT, "cachebox/_stats.py": _STATS, "cachebox/lru.py": _LRU},
    tests=_TESTS,
)
