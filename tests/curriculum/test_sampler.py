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


# --------------------------------------------------------------------------- posterior, balance, state


@dataclass(frozen=True)
class _Spec:
    family: str
    difficulty: int


@dataclass(frozen=True)
class TierTask:
    id: str
    spec: _Spec


def test_posterior_update_by_hand():
    c = make(prior=(1.0, 1.0))
    c.update([("t0", True), ("t0", True), ("t0", False)])
    s = c.stats["t0"]
    assert (s.alpha, s.beta, s.n, s.passes) == (3.0, 2.0, 3, 2)
    assert s.mean == 3 / 5


def test_decay_discounts_old_evidence_towards_the_prior():
    c = make(decay=0.5)
    c.update([("t0", False)] * 4)  # beta = 1 + 4
    c.update([("t0", True)])  # old evidence halved first: beta = 1 + 2, then alpha = 2
    s = c.stats["t0"]
    assert (s.alpha, s.beta) == (2.0, 3.0)


def test_parked_tasks_are_retested_occasionally():
    c = make(n=4, retest_p=0.2, min_obs=4)
    c.update([("t0", True)] * 20)
    seen = sum("t0" in {t.id for t in c.sample(4)} for _ in range(300))
    assert 20 < seen < 120  # about 0.2 * 300
    assert c.metrics()["curriculum/retests"] == seen


def test_batches_are_balanced_over_families_and_tiers():
    tasks = [TierTask(f"a{i}", _Spec("fa", 1)) for i in range(10)] + [
        TierTask(f"b{i}", _Spec("fb", 2)) for i in range(2)
    ]
    c = BetaCurriculum(tasks, seed=0)  # type: ignore[arg-type]
    batch = c.sample(4)
    fams = [t.spec.family for t in batch]
    assert fams.count("fb") == 2 and fams.count("fa") == 2
    m = c.metrics()
    assert m["curriculum/sampled/fa/1"] == 2 and m["curriculum/sampled/fb/2"] == 2
    unbalanced = BetaCurriculum(tasks, seed=0, balance=False)  # type: ignore[arg-type]
    assert len(unbalanced.sample(4)) == 4


def test_replacements_are_fresh_tasks_and_counted():
    c = make(n=6)
    batch = c.sample(3)
    fresh = c.replacements(2, exclude=[t.id for t in batch])
    assert len(fresh) == 2 and not {t.id for t in fresh} & {t.id for t in batch}
    assert c.metrics()["curriculum/replaced_groups"] == 2
    assert c.replacements(10, exclude=[f"t{i}" for i in range(6)]) == []  # pool exhausted: no crash


def test_state_dict_round_trip_samples_identically():
    a = make(n=8)
    a.update([("t1", True), ("t2", False)] * 5)
    a.sample(3)
    b = make(n=8)
    b.load_state_dict(__import__("json").loads(__import__("json").dumps(a.state_dict())))
    assert [t.id for t in a.sample(4)] == [t.id for t in b.sample(4)]
    assert a.stats == b.stats
