"""The scheduler in-process: resume by run id, hand-off to the experience queue, graceful stop."""

from __future__ import annotations

import asyncio

from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.scripted import OraclePolicy
from sparring.rollout.buffer import ExperienceQueue
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from tests_support import make_clamp_task


class CountingOracle(OraclePolicy):
    """Counts turns across episodes: each episode plays a copy bound to its task, so the count is shared."""

    def __init__(self):
        self.played: list[int] = []

    @property
    def turns(self):
        return len(self.played)

    async def act(self, request):
        self.played.append(request.step)
        return await super().act(request)


def _sched(backend, store, **kw):
    return RolloutScheduler(SandboxPool(backend), PytestJudge(backend), store, **kw)


def test_resume_skips_what_is_stored_and_never_duplicates(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    pol = CountingOracle()

    async def go():
        s1 = await _sched(backend, store, concurrency=2).run([clamp_task], pol, 3, run_id="R", resume=True)
        turns = pol.turns
        s2 = await _sched(backend, store, concurrency=2).run([clamp_task], pol, 3, run_id="R", resume=True)
        s3 = await _sched(backend, store, concurrency=2).run([clamp_task], pol, 3, run_id="R")  # not a resume
        return s1, s2, s3, turns

    s1, s2, s3, turns = asyncio.run(go())
    assert s1.stored == 3 and s1.resumed == 0 and turns == 15
    assert s2.resumed == 3 and s2.stored == 3 and pol.turns == 15 + 15  # s2 played nothing; s3 played 3
    assert {t.id for t in s2.trajectories} == {t.id for t in s1.trajectories}
    assert store.search(TrajQuery(run_id="R"))[0] == 6  # s1's 3 + s3's 3 fresh ids
    store.close()


def test_every_finished_sample_is_stored_then_handed_to_the_experience_queue(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")

    async def go():
        q = ExperienceQueue(maxsize=16, max_staleness=0)
        s = await RolloutScheduler(
            SandboxPool(backend), PytestJudge(backend), store, sink=q, concurrency=2
        ).run([clamp_task], OraclePolicy(), 2)
        return s, await q.get_batch(2, trainer_version=0, timeout=1)

    s, batch = asyncio.run(go())
    assert {t.id for t in batch} == {t.id for t in s.trajectories}
    assert all(store.get(t.id).status == "ok" for t in batch)
    store.close()


class StopOnFirstTurn(OraclePolicy):
    """Asks the scheduler to stop at the first turn it plays (as a SIGTERM would, mid-run)."""

    def __init__(self):
        self.sched = None

    async def act(self, request):
        if self.sched is not None:
            self.sched.request_stop()
        return await super().act(request)


def test_stop_request_finishes_in_flight_work_and_checkpoints_the_rest(backend, tmp_path):
    tasks = [make_clamp_task(tmp_path / f"t{i}", task_id=f"clamp-{i}") for i in range(3)]
    store = SQLiteStore(tmp_path / "s.db")

    async def go():
        pol = StopOnFirstTurn()
        sched = pol.sched = RolloutScheduler(SandboxPool(backend), PytestJudge(backend), store, concurrency=2)
        s1 = await sched.run(tasks, pol, 2, run_id="S", resume=True)
        run1 = store.get_run("S")
        s2 = await _sched(backend, store, concurrency=2).run(
            tasks, OraclePolicy(), 2, run_id="S", resume=True
        )
        return s1, run1, s2

    s1, run1, s2 = asyncio.run(go())
    # the rollouts holding a slot when the stop came finished and were stored; nothing new started
    assert s1.interrupted and 1 <= s1.stored <= 2 and s1.stored + s1.pending == 6
    assert set(s1.statuses) == {"ok"}
    assert (
        run1 is not None
        and run1["summary"]["interrupted"]
        and len(run1["summary"]["pending_ids"]) == s1.pending
    )
    assert s2.resumed == s1.stored and s2.stored == 6 and not s2.interrupted
    assert store.search(TrajQuery(run_id="S"))[0] == 6
    assert store.get_run("S")["summary"]["pending_ids"] == []
    store.close()


def test_without_keeping_trajectories_the_summary_still_counts_everything(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    s = asyncio.run(
        _sched(backend, store, concurrency=2).run(
            [clamp_task], OraclePolicy(), 3, run_id="K", keep_trajectories=False
        )
    )
    assert s.trajectories == [] and s.stored == 3 and s.statuses == {"ok": 3} and s.reward_mean == 1.0
    assert s.pass_rate == 1.0 and store.search(TrajQuery(run_id="K"))[0] == 3
    store.close()


class _Logging(OraclePolicy):
    def __init__(self, tag, log):
        self.tag, self.log = tag, log

    async def act(self, request):
        if request.step == 0:
            self.log.append(self.tag)
        return await super().act(request)


def test_concurrent_runs_share_the_slots_and_eval_goes_before_queued_training(backend, tmp_path):
    tasks = [make_clamp_task(tmp_path / f"t{i}", task_id=f"clamp-{i}") for i in range(2)]
    store = SQLiteStore(tmp_path / "s.db")
    log: list[str] = []

    async def go():
        sched = _sched(backend, store, concurrency=1)
        train = asyncio.ensure_future(sched.run(tasks, _Logging("train", log), 2, run_id="tr"))
        while not log:  # the first training rollout holds the only slot; the other three queue
            await asyncio.sleep(0.01)
        ev = await sched.run(tasks[:1], _Logging("eval", log), 2, run_id="ev", priority="eval")
        return await train, ev

    tr, ev = asyncio.run(go())
    assert tr.statuses == {"ok": 4} and ev.statuses == {"ok": 2}
    assert log[:3] == ["train", "eval", "eval"] and log.count("train") == 4
    assert store.search(TrajQuery(run_id="tr"))[0] == 4 and store.search(TrajQuery(run_id="ev"))[0] == 2
    store.close()
