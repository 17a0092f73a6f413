"""The Beta curriculum samples near a 0.5 pass rate and parks solved / impossible tasks."""

from __future__ import annotations

from dataclasses import dataclass

from sparring.curriculum.sampler import BetaCurriculum


@dataclass(frozen=True)
class FakeTaskRef:
    """A stand-in carrying only an id (the sampler reads nothing else)."""

    id: str


def make(n=6, **kw):
    return BetaCurriculum([FakeTaskRef(f"t{i}") for i in range(n)], seed=0, **kw)  # type: ignore[list-item]


def test_samples_distinct_tasks():
    c = make()
    batch = c.sample(4)
    assert len({t.id for t in batch}) == 4
    assert len(c.sample(100)) == 6


def test_parks_solved_and_impossible_and_prefers_the_frontier():
    c = make(retest_p=0.0)
    c.update([("t0", True)] * 30 + [("t1", False)] * 30 + [("t2", True), ("t2", False)] * 10)
    assert c.parked("t0") and c.parked("t1") and not c.parked("t2")
    counts = {t.id: 0 for t in c.tasks}
    for _ in range(200):
        for t in c.sample(2):
            counts[t.id] += 1
    assert counts["t0"] == counts["t1"] == 0
    assert counts["t2"] > 50
    m = c.metrics()
    assert abs(m["curriculum/parked_frac"] - 2 / 6) < 1e-9


def test_deterministic_given_seed():
    a, b = make(), make()
    assert [t.id for t in a.sample(3)] == [t.id for t in b.sample(3)]
