"""The experience queue (staleness and length bounds, back-pressure) and priority-class slots."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sparring.errors import ConfigError
from sparring.rollout.buffer import BatchLag, ExperienceQueue
from sparring.rollout.slots import PrioritySlots, priority_rank
from sparring.trajectory import TokenTrace, Trajectory


def traj(i: int, version: int = 0, tokens: int = 3) -> Trajectory:
    return Trajectory(id=f"t{i}", task_id="a", task_digest="d" * 64, policy="p", status="ok", reward=1.0,
                      policy_version=version,
                      traces=[TokenTrace(prompt_ids=[1], completion_ids=list(range(tokens)))])  # fmt: skip


def test_synchronous_queue_drops_every_older_version_counted_and_logged(caplog):
    async def go():
        q = ExperienceQueue(maxsize=10, max_staleness=0)
        for i, v in enumerate([0, 1, 1, 0]):
            await q.put(traj(i, v))
        return q, await q.get_batch(10, trainer_version=1, timeout=0.05)

    with caplog.at_level(logging.WARNING, logger="sparring.rollout.buffer"):
        q, got = asyncio.run(go())
    assert [t.id for t in got] == ["t1", "t2"]
    assert q.stats.dropped == {"stale": 2} and q.stats.put == 4 and q.stats.taken == 2
    assert sum("stale" in r.message for r in caplog.records) == 2


def test_staleness_bound_k_accepts_lag_up_to_k():
    async def go():
        q = ExperienceQueue(max_staleness=1)
        for i, v in enumerate([0, 1, 2]):
            await q.put(traj(i, v))
        return q, await q.get_batch(3, trainer_version=2, timeout=0.05)

    q, got = asyncio.run(go())
    assert [t.policy_version for t in got] == [1, 2] and q.stats.dropped == {"stale": 1}


def test_too_long_samples_are_dropped_on_put():
    async def go():
        q = ExperienceQueue(max_tokens=5)
        await q.put(traj(0, tokens=5))
        await q.put(traj(1, tokens=6))
        return q

    q = asyncio.run(go())
    assert q.qsize() == 1 and q.stats.dropped == {"length": 1}


def test_full_queue_makes_producers_wait_for_the_trainer():
    async def go():
        q = ExperienceQueue(maxsize=2)
        await q.put(traj(0))
        await q.put(traj(1))
        third = asyncio.ensure_future(q.put(traj(2)))
        await asyncio.sleep(0.05)
        blocked = not third.done()
        got = await q.get_batch(1, trainer_version=0)
        await asyncio.wait_for(third, 1)
        return blocked, got, q.qsize()

    blocked, got, left = asyncio.run(go())
    assert blocked and [t.id for t in got] == ["t0"] and left == 2


def test_get_batch_returns_what_it_has_at_timeout_and_bad_bounds_are_refused():
    async def go():
        q = ExperienceQueue()
        await q.put(traj(0))
        return await q.get_batch(4, trainer_version=0, timeout=0.05)

    assert len(asyncio.run(go())) == 1
    with pytest.raises(ConfigError):
        ExperienceQueue(max_staleness=-1)


def test_slots_serve_eval_then_train_then_replay_and_survive_cancelled_waiters():
    async def go():
        slots = PrioritySlots(1)
        order: list[str] = []
        await slots.acquire()

        async def want(name: str):
            async with slots.slot(priority_rank(name)):
                order.append(name)
                await asyncio.sleep(0)

        tasks = [asyncio.ensure_future(want(n)) for n in ("replay", "train", "eval", "train")]
        gone = asyncio.ensure_future(want("eval"))
        await asyncio.sleep(0.01)
        gone.cancel()
        await asyncio.sleep(0.01)
        slots.release()
        await asyncio.gather(*tasks)
        return order, slots.in_use

    order, in_use = asyncio.run(go())
    assert order == ["eval", "train", "train", "replay"] and in_use == 0
    with pytest.raises(ConfigError, match="unknown priority"):
        priority_rank("urgent")


def test_batch_writer_groups_commits_and_fails_only_the_bad_record(tmp_path):
    from sparring.errors import StoreError
    from sparring.rollout.writer import BatchWriter
    from sparring.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "s.db")

    async def go():
        w = BatchWriter(store, max_batch=8)
        bad = traj(99)
        bad.components = {"x": object()}  # type: ignore[dict-item]
        results = await asyncio.gather(
            *(w.put(traj(i)) for i in range(20)), w.put(bad), return_exceptions=True
        )
        await w.close()
        return w.batches, results

    batches, results = asyncio.run(go())
    assert results[:20] == [None] * 20 and isinstance(results[20], StoreError)
    assert store.count() == 20 and batches < 20  # grouped, not one transaction per sample
    store.close()


@pytest.mark.parametrize("k", [0, 1, 2])
def test_batch_lag_trains_on_the_batch_sampled_k_iterations_earlier(k):
    """The recipe's staleness bound: the same batches, in the same order, as a list delayed by k."""

    async def go():
        lag, ready = BatchLag(k), []
        version = 0
        for it in range(5):
            batch = [traj(10 * it + j, version) for j in range(it % 3 + 1)]  # uneven sizes
            got = await lag.push(batch, version)
            ready.append(None if got is None else [t.id for t in got])
            if got is not None:
                version += 1  # one update per trained batch
        return lag, ready

    lag, ready = asyncio.run(go())
    sizes = [it % 3 + 1 for it in range(5)]
    expected = [None] * k + [[f"t{10 * it + j}" for j in range(sizes[it])] for it in range(5 - k)]
    assert ready == expected
    assert [[t.id for t in b] for b in lag.pending()] == [
        [f"t{10 * it + j}" for j in range(sizes[it])] for it in range(5 - k, 5)
    ]
    assert lag.queue.stats.dropped == {}


def test_batch_lag_restores_its_pending_batches_and_drops_what_grew_too_stale():
    async def go():
        lag = BatchLag(1)
        await lag.restore([[traj(1, 0), traj(2, 0)]])
        fresh = await lag.push([traj(3, 0)], trainer_version=1)
        stale = await lag.push([traj(4, 3)], trainer_version=3)  # t3 is 3 versions old: dropped, counted
        return lag, fresh, stale

    lag, fresh, stale = asyncio.run(go())
    assert [t.id for t in fresh] == ["t1", "t2"]
    assert stale == [] and lag.queue.stats.dropped == {"stale": 1}
    assert [[t.id for t in b] for b in lag.pending()] == [["t4"]]
