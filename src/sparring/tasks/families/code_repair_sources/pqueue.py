"""Base ``pqueue``: a stable priority queue on a hand-written binary heap."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""A stable priority queue backed by a binary min-heap."""
from pqueue.queue import PriorityQueue, nsmallest

__all__ = ["PriorityQueue", "nsmallest"]
'''

_HEAP = r'''"""Array-backed binary min-heap primitives."""


def parent(i):
    """Index of the parent of node i."""
    return (i - 1) // 2


def sift_up(heap, i):
    """Move heap[i] up until its parent is not larger."""
    while i > 0:
        p = parent(i)
        if heap[i] < heap[p]:
            heap[i], heap[p] = heap[p], heap[i]
            i = p
        else:
            break


def sift_down(heap, i):
    """Move heap[i] down until neither child is smaller."""
    n = len(heap)
    while True:
        smallest = i
        left = 2 * i + 1
        right = left + 1
        if left < n and heap[left] < heap[smallest]:
            smallest = left
        if right < n and heap[right] < heap[smallest]:
            smallest = right
        if smallest == i:
            return
        heap[i], heap[smallest] = heap[smallest], heap[i]
        i = smallest


def heapify(items):
    """A new list holding items in heap order."""
    heap = list(items)
    for i in range(len(heap) // 2 - 1, -1, -1):
        sift_down(heap, i)
    return heap
'''

_QUEUE = r'''"""A stable priority queue: lowest priority first, first-in first-out among equals."""
from pqueue._heap import heapify, sift_down, sift_up


class PriorityQueue:
    """Items with numeric priorities; reverse=True pops the highest priority first."""

    def __init__(self, items=(), reverse=False):
        self.reverse = reverse
        self._counter = 0
        self._heap = heapify([self._entry(item, priority) for item, priority in items])

    def _entry(self, item, priority):
        key = -priority if self.reverse else priority
        entry = (key, self._counter, item)
        self._counter += 1
        return entry

    def __len__(self):
        return len(self._heap)

    def __bool__(self):
        return len(self._heap) > 0

    def push(self, item, priority=0):
        """Add item with the given priority."""
        self._heap.append(self._entry(item, priority))
        sift_up(self._heap, len(self._heap) - 1)

    def peek(self):
        """The next item, without removing it."""
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][2]

    def pop(self):
        """Remove and return the next item."""
        if not self._heap:
            raise IndexError("pop from an empty queue")
        last = self._heap.pop()
        if not self._heap:
            return last[2]
        top = self._heap[0]
        self._heap[0] = last
        sift_down(self._heap, 0)
        return top[2]

    def drain(self):
        """Pop every item, in order."""
        out = []
        while self._heap:
            out.append(self.pop())
        return out


def nsmallest(pairs, n):
    """The n items of (item, priority) pairs with the lowest priorities, in order."""
    q = PriorityQueue(pairs)
    return [q.pop() for _ in range(min(n, len(q)))]
'''

_TESTS = r"""import pytest

from pqueue import PriorityQueue, nsmallest
from pqueue._heap import heapify, parent, sift_down, sift_up


def _is_heap(heap):
    return all(heap[parent(i)] <= heap[i] for i in range(1, len(heap)))


def test_push_pop_in_priority_order():
    q = PriorityQueue()
    q.push("c", 3)
    q.push("a", 1)
    q.push("b", 2)
    assert [q.pop(), q.pop(), q.pop()] == ["a", "b", "c"]


def test_fifo_among_equal_priorities():
    q = PriorityQueue()
    for item in "xyzw":
        q.push(item, 5)
    assert q.drain() == ["x", "y", "z", "w"]


def test_default_priority_is_zero():
    q = PriorityQueue()
    q.push("late", 1)
    q.push("zero")
    q.push("neg", -1)
    assert q.drain() == ["neg", "zero", "late"]


def test_peek_does_not_remove():
    q = PriorityQueue([("b", 2), ("a", 1)])
    assert q.peek() == "a"
    assert len(q) == 2
    assert q.pop() == "a"
    assert q.peek() == "b"


def test_empty_queue_errors():
    q = PriorityQueue()
    with pytest.raises(IndexError):
        q.pop()
    with pytest.raises(IndexError):
        q.peek()


def test_len_and_bool():
    q = PriorityQueue()
    assert len(q) == 0 and not q
    q.push("a", 1)
    assert len(q) == 1 and q
    q.pop()
    assert not q


def test_single_item_pop():
    q = PriorityQueue([("only", 4)])
    assert q.pop() == "only"
    assert len(q) == 0


def test_init_from_items():
    assert PriorityQueue([("b", 2), ("a", 1), ("c", 3)]).drain() == ["a", "b", "c"]


def test_reverse_order():
    assert PriorityQueue([("b", 2), ("a", 1), ("c", 3)], reverse=True).drain() == ["c", "b", "a"]


def test_many_items_sorted_and_stable():
    pairs = [(f"item{i}", (i * 7919) % 23) for i in range(200)]
    q = PriorityQueue(pairs)
    expected = [item for item, _ in sorted(pairs, key=lambda p: p[1])]
    assert q.drain() == expected


def test_interleaved_push_pop():
    q = PriorityQueue()
    out = []
    for i, p in enumerate([5, 3, 8, 1, 9, 2, 7]):
        q.push(i, p)
        if i % 2 == 1:
            out.append(q.pop())
    out.extend(q.drain())
    assert out == [1, 3, 5, 0, 6, 2, 4]


def test_heapify_property():
    for items in ([9, 4, 7, 1, 8, 2, 6], [3, 2, 1], list(range(20, 0, -1)), [5]):
        heap = heapify(items)
        assert _is_heap(heap)
        assert sorted(heap) == sorted(items)


def test_sift_up_and_down():
    heap = [1, 3, 2]
    heap.append(0)
    sift_up(heap, 3)
    assert heap[0] == 0 and _is_heap(heap)
    heap = [9, 1, 2, 3, 4]
    sift_down(heap, 0)
    assert heap[0] == 1 and _is_heap(heap)


def test_parent():
    assert [parent(i) for i in range(1, 7)] == [0, 0, 1, 1, 2, 2]


def test_nsmallest():
    pairs = [("a", 5), ("b", 1), ("c", 3)]
    assert nsmallest(pairs, 2) == ["b", "c"]
    assert nsmallest(pairs, 10) == ["b", "c", "a"]
    assert nsmallest([], 3) == []
"""

BASE = BaseSource(
    name="pqueue",
    module="queue",
    summary="a stable priority queue (FIFO among equal priorities) on a hand-written binary heap",
    files={"pqueue/__init__.py": _INIT, "pqueue/_heap.py": _HEAP, "pqueue/queue.py": _QUEUE},
    tests=_TESTS,
)
