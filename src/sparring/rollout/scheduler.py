"""Group rollouts on bounded resources; every sample accounted for, whatever happens to it.

For each task, ``group_size`` samples form one GRPO group. The scheduler:

* bounds each resource on its own: rollouts (= sandboxes) in flight
  (``concurrency``, served by priority class: eval, train, replay), policy
  requests in flight (``model_concurrency``) and judge runs (``judge_concurrency``);
* over-provisions groups with ``spares``: G + S members start, and once G of
  them have a trainable result the rest are cancelled (not stored: they never
  finished), so one slow or failed member does not stall its group;
* types every final status (docs/rollouts.md) and gives each stage its own time
  limit (:class:`~sparring.rollout.episode.StageLimits`);
* retries an infrastructure fault (sandbox died, hung, failed to start) on a
  fresh sandbox with exponential backoff. With ``snapshot_every`` = k the
  sandbox is snapshotted every k steps and a retry continues the rollout from
  the last snapshot instead of from scratch. A sample still failing after its
  retries is written as ``infra_error`` (reward None, never 0) and queued for
  replay after the rest of the run (``replay_rounds``), where it may succeed;
* writes every finished sample to the store *before* reporting it, under an id
  derived from (run id, seed, group, sample), so a run killed at any moment and
  started again with ``resume=True`` skips what is stored and never duplicates;
* stops gracefully on :meth:`RolloutScheduler.request_stop` (SIGINT/SIGTERM in
  the CLI): nothing new starts, in-flight rollouts get ``drain_s`` to finish and
  are stored; what is still running then is cancelled and recorded as pending
  in the run's checkpoint, to be redone on resume.

The rules for a failed rollout, in one place:

=================  ==========================  ================================  ========
what failed        status                      what happens                      reward
=================  ==========================  ================================  ========
sandbox (died,     retried on a fresh sandbox  ``infra_error`` once retries and  None
hung, no start)    (from the last snapshot)    replay rounds are spent
policy server      retried per request by the  ``policy_error``; the partial     None
                   client (backoff)            conversation is kept
judge              retried ``judge_retries``   ``judge_error``; rollout and      None
                                               diff kept for re-judging
step budget        -                           ``truncated``, judged             judged
wall budget        -                           ``timeout``, judged               judged
a bug              not retried                 ``infra_error`` with its cause    None
=================  ==========================  ================================  ========

Nothing is dropped: a sample that cannot be completed is stored with the
status that says why, and only ``ok``/``truncated``/``timeout`` with a reward
are trainable.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from sparring.errors import ConfigError, SandboxError, one_line
from sparring.judge.base import Judge, expect_judgements
from sparring.policy.base import Policy
from sparring.rollout.branching import branch_id, check_branchable, restore_extras, select_points
from sparring.rollout.buffer import ExperienceQueue
from sparring.rollout.episode import Episode, score_trajectory
from sparring.rollout.in_flight import Outcome, RunState, Sample, SampleGroup, sample_id
from sparring.rollout.run_records import RolloutSummary, SchedulerConfig, SchedulerStats
from sparring.rollout.runner import SampleRequest, SampleRunner
from sparring.rollout.slots import PrioritySlots, priority_rank
from sparring.rollout.writer import BatchWriter
from sparring.sandbox.base import Sandbox
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajectoryStore
from sparring.tasks.loader import Task
from sparring.tasks.sandbox_spec import TaskSpecs
from sparring.trajectory import Trajectory

__all__ = [
    "INFRA_FAULTS",
    "RolloutScheduler",
    "RolloutSummary",
    "SchedulerConfig",
    "SchedulerStats",
    "sample_id",
]

INFRA_FAULTS: tuple[type[BaseException], ...] = (SandboxError, OSError, TimeoutError)


class RolloutScheduler:
    """Runs GRPO groups of episodes with bounded concurrency, per-stage limits, retries and resume;
    every requested sample is stored, whatever happened to it."""

    def __init__(
        self,
        pool: SandboxPool | None,
        judge: Judge | None,
        store: TrajectoryStore | None,
        *,
        on_done: Callable[[Trajectory], None] | None = None,
        sink: ExperienceQueue | None = None,
        config: SchedulerConfig | None = None,
        runner: SampleRunner | None = None,
        **options: Any,
    ) -> None:
        """``options`` are :class:`SchedulerConfig` fields (``concurrency=8, spares=1``...). With a
        ``runner`` each sample is played and judged there (another node) instead of in this process;
        the pool and judge then serve nothing here and may be None."""
        known = {f.name for f in fields(SchedulerConfig)}
        unknown = set(options) - known
        if unknown:
            raise TypeError(f"unknown scheduler option(s): {', '.join(sorted(unknown))}")
        base = config or SchedulerConfig()
        self.config = SchedulerConfig(**{**{k: getattr(base, k) for k in known}, **options})
        self._pool = pool
        self.specs = TaskSpecs()
        """Each task's sandbox spec (workspace pinned by digest, limits, pinned layer), resolved once per version."""
        self._judge_ = judge
        self.store = store
        self.on_done = on_done
        self.sink = sink
        self.runner = runner
        self.stats = SchedulerStats()
        self._stopping = False
        self._runs: set[RunState] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def pool(self) -> SandboxPool:
        if self._pool is None:
            raise ConfigError("this scheduler plays samples through its runner: it has no sandbox pool")
        return self._pool

    @property
    def judge(self) -> Judge:
        if self._judge_ is None:
            raise ConfigError("this scheduler plays samples through its runner: it has no judge")
        return self._judge_

    # -- control ---------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Start nothing new; let in-flight rollouts finish for ``drain_s``, then cancel them."""
        if self._stopping:
            return
        self._stopping = True
        for s in self._all_samples():
            if s.state == "waiting" and s.handle is not None:
                s.handle.cancel()
        loop = asyncio.get_running_loop()
        loop.call_later(self.config.drain_s, self._cancel_running)

    def _all_samples(self) -> list[Sample]:
        return [s for r in self._runs for s in r.samples]

    def _resources(self) -> None:
        """Slots and semaphores shared by every run of this scheduler on the running loop, so
        concurrent runs (an eval run beside a training run) share the bounds and their priorities."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        c = self.config
        self._loop = loop
        self._slots = PrioritySlots(self.runner.capacity if self.runner is not None else c.concurrency)
        self._model_sem = asyncio.Semaphore(c.model_concurrency or c.concurrency)
        self._judge_sem = asyncio.Semaphore(
            c.judge_concurrency or min(c.concurrency, 2 * (os.cpu_count() or 1))
        )

    def _cancel_running(self) -> None:
        for s in self._all_samples():
            if s.state in ("running", "judging") and s.handle is not None:
                s.handle.cancel()

    @property
    def stopping(self) -> bool:
        return self._stopping

    # -- one sample ------------------------------------------------------------------------------

    async def _sandbox(self, task: Task, ep: Episode) -> Sandbox:
        if ep.mark is not None and "snapshot" not in inspect.signature(self.pool.backend.create).parameters:
            ep.mark = None  # this backend cannot start from a snapshot: start over
            ep.rewind()
        if ep.mark is not None:  # continue from the last snapshot in a fresh sandbox
            spec = self.pool.shape(await self.specs(task))
            create: Any = self.pool.backend.create  # backends that snapshot take `snapshot=` (local, OCI)
            sb: Sandbox = await create(spec, snapshot=ep.mark.snapshot_id)
            return sb
        return await self.pool.acquire_spec(await self.specs(task))

    def _episode(self, s: Sample, policy: Policy, seed: int, max_steps: int | None = None) -> Episode:
        c = self.config
        if s.point is not None:  # a branch: the root's conversation up to the branch point
            assert s.parent is not None and s.parent.episode is not None
            return s.parent.episode.fork(s.point, s.k)
        steps = max_steps or c.max_steps or 0
        return Episode(
            s.group.task, policy, sample_index=s.index, seed=seed, max_steps=steps, limits=c.limits,
            snapshot_every=c.snapshot_every, model_sem=self._model_sem, branch=c.branch,
        )  # fmt: skip

    def _record(self, ep: Episode, s: Sample, run_id: str) -> Trajectory:
        traj = ep.trajectory(self.judge, group_id=s.group.gid, run_id=run_id, traj_id=s.traj_id)
        if s.point is not None and s.parent is not None:
            traj.parent_id, traj.branch_turn = s.parent.traj_id, s.point.turn
        return traj

    async def _attempts(self, r: RunState, s: Sample) -> tuple[Trajectory, Any]:
        """Play ``s`` and take its final diff, retrying infrastructure faults. Returns the unjudged
        trajectory and its diff, or an ``infra_error`` trajectory and None. The agent's sandbox is
        released before judging: the judge needs only the diff."""
        c, task, run_id = self.config, s.group.task, r.run_id
        ep = self._episode(s, r.policy, r.seed, r.max_steps)
        t0 = time.perf_counter()
        sandbox_ms = 0.0
        last = ""
        for k in range(c.max_retries + 1):
            s.attempts += 1
            sb: Sandbox | None = None
            broken = True
            try:
                from_step = ep.mark.step if ep.mark is not None else 0
                ta = time.perf_counter()
                sb = await asyncio.wait_for(self._sandbox(task, ep), c.limits.sandbox_start_s)
                if s.point is not None and ep.mark == s.point.mark:  # a fork: /tmp and home too
                    await restore_extras(sb, s.point.extras, timeout=c.limits.sandbox_start_s)
                dt = (time.perf_counter() - ta) * 1000
                sandbox_ms += dt
                r.stats.sandbox_ms += dt
                await ep.play(sb)
                diff = await asyncio.wait_for(sb.diff(), c.limits.sandbox_start_s)
                traj = self._record(ep, s, run_id)
                traj.diff = diff.to_json()
                if ep.branch_points:
                    s.episode = ep
                broken = False
                traj.timings = {
                    "rollout_ms": ep.play_ms, "policy_ms": ep.policy_ms, "tool_ms": ep.tool_ms,
                    "sandbox_acquire_ms": sandbox_ms, "t0": t0,
                }  # fmt: skip
                return traj, diff
            except INFRA_FAULTS as e:
                what = (
                    "sandbox start timed out" if isinstance(e, TimeoutError) and sb is None else one_line(e)
                )
                last = f"{type(e).__name__}: {what}"
                resumed = f" (from snapshot at step {from_step})" if from_step else ""
                s.infra_errors.append(f"attempt {s.attempts}{resumed}: {last}")
                if (
                    isinstance(e, SandboxError)
                    and "snapshot" in str(e)
                    and ep.mark is not None
                    and not s.is_branch
                ):
                    ep.mark = None  # the snapshot itself is unusable: start over next time
                ep.rewind()
                if k < c.max_retries:
                    r.stats.retried += 1
                    await asyncio.sleep(min(c.backoff_max_s, c.backoff_s * 2**k))
            except Exception as e:  # a bug must not lose the sample: store it, typed, with its cause
                last = "unexpected " + "".join(traceback.format_exception_only(e)).strip()
                s.infra_errors.append(f"attempt {s.attempts}: {last}")
                break
            finally:
                if sb is not None:
                    tr = time.perf_counter()
                    await asyncio.shield(self.pool.release(sb, broken=broken))
                    r.stats.sandbox_ms += (time.perf_counter() - tr) * 1000
        traj = self._record(ep, s, run_id)
        traj.status, traj.error, traj.reward = "infra_error", last, None
        traj.timings = {"total_ms": (time.perf_counter() - t0) * 1000}
        return traj, None

    async def _judge(self, traj: Trajectory, task: Task, diff: Any) -> None:
        c = self.config
        t0 = traj.timings.pop("t0", time.perf_counter())
        tj = time.perf_counter()
        await score_trajectory(traj, task, diff, self.judge, limits=c.limits, judge_sem=self._judge_sem,
                               retries=c.judge_retries)  # fmt: skip
        traj.timings["judge_ms"] = (time.perf_counter() - tj) * 1000
        traj.timings["total_ms"] = (time.perf_counter() - t0) * 1000

    async def play_sample(self, req: SampleRequest) -> Trajectory:
        """Play and judge one sample here, retrying infrastructure faults (what a node does for a
        driver). The trajectory carries every attempt, those ``req`` already took included."""
        self._resources()
        g = SampleGroup(req.task, req.group_id, 1)
        s = Sample(g, req.index, req.traj_id, attempts=req.attempts, infra_errors=list(req.infra_errors))
        r = RunState(
            req.run_id, req.policy, req.seed, True, SchedulerStats(requested=1), max_steps=req.max_steps
        )
        expect_judgements(self.judge, req.task)
        announced = True  # as in _run_sample: withdrawn unless the judgement begins
        try:
            traj, diff = await self._attempts(r, s)
            if diff is not None:
                announced = False
                await self._judge(traj, req.task, diff)
        finally:
            if announced:
                expect_judgements(self.judge, req.task, -1)
        traj.attempts, traj.infra_errors = s.attempts, list(s.infra_errors)
        return traj

    async def _play(self, r: RunState, s: Sample) -> tuple[Trajectory, Any]:
        """The sample played (and, by a runner, judged) wherever this scheduler plays samples."""
        if self.runner is None:
            return await self._attempts(r, s)
        req = SampleRequest(s.group.task, r.policy, s.index, s.traj_id, s.group.gid, r.run_id, r.seed,
                            s.attempts, list(s.infra_errors), self.config.max_steps)  # fmt: skip
        traj = await self.runner.run(req)
        r.stats.retried += max(0, traj.attempts - s.attempts - 1)
        s.attempts, s.infra_errors = traj.attempts, list(traj.infra_errors)
        return traj, None

    async def _run_sample(self, r: RunState, s: Sample, rank: int) -> None:
        finishing: asyncio.Future[None] | None = None
        announced = False  # this sample's judgement announced to the judge and not yet begun
        try:
            async with self._slots.slot(rank):
                if self._stopping:
                    return
                s.state = "running"
                r.stats.in_flight += 1
                if self.runner is None:  # judged here when played: the judge can ready a launcher meanwhile
                    expect_judgements(self.judge, s.group.task)
                    announced = True
                try:
                    traj, diff = await self._play(r, s)
                finally:
                    r.stats.in_flight -= 1
            # the rollout slot (and sandbox) is free for the next sample while this one is judged
            if diff is not None:
                s.state = "judging"
                r.stats.judging += 1
                announced = False
                try:
                    await self._judge(traj, s.group.task, diff)
                finally:
                    r.stats.judging -= 1
            if s.episode is not None:  # a root with branch points: its branches are stored before it
                try:
                    await self._branches(r, s, rank)
                finally:
                    s.episode = None
            s.state = "finishing"  # from here on nothing cancels it: it is stored, then reported
            finishing = asyncio.ensure_future(self._finish(r, s, traj))
            await asyncio.shield(finishing)
        except asyncio.CancelledError:
            if finishing is not None:
                await finishing  # never half-reported: the write and the accounting complete
            elif s.state != "done":
                s.state = "cancelled"
                r.stats.cancelled += 1
        finally:
            if announced:  # played to no diff (an infrastructure fault), or cancelled: no judgement comes
                expect_judgements(self.judge, s.group.task, -1)

    async def _branches(self, r: RunState, root: Sample, rank: int) -> None:
        """Play, judge and store every branch of ``root`` (K per branch point), each in its own sandbox."""
        c = self.config
        assert root.episode is not None and c.branch is not None
        points = select_points(c.branch, root.episode.branch_points, root.episode.traces)
        kids = [
            Sample(root.group, root.index, branch_id(root.traj_id, bp.turn, k), parent=root, point=bp, k=k)
            for bp in points for k in range(c.branch.branches)
        ]  # fmt: skip
        r.branches = [b for b in r.branches if b.parent is not root] + kids  # a replayed root: its new ones
        for kid in kids:
            kid.handle = asyncio.ensure_future(self._run_sample(r, kid, rank))
        handles = [k.handle for k in kids if k.handle is not None]
        try:
            await asyncio.gather(*handles)
        except BaseException:
            for h in handles:
                h.cancel()
            await asyncio.gather(*handles, return_exceptions=True)
            raise

    async def _finish(self, r: RunState, s: Sample, traj: Trajectory) -> None:
        traj.attempts = s.attempts
        traj.infra_errors = list(s.infra_errors)
        if self.store is not None:  # stored before it is reported, counted or handed on
            ts = time.perf_counter()
            assert r.writer is not None
            await r.writer.put(traj)
            r.stats.store_ms += (time.perf_counter() - ts) * 1000
        s.outcome, s.state = Outcome.of(traj), "done"
        s.traj = traj if r.keep else None
        if not s.is_branch:  # branches are extra samples of their root's state, not group members
            self._account(r, s, traj)
        if self.sink is not None:
            await self.sink.put(traj)
        if self.on_done is not None:
            self.on_done(traj)

    def _account(self, r: RunState, s: Sample, traj: Trajectory) -> None:
        r.stats.done += 1
        if traj.status != "ok":
            r.stats.failed += 1
        g = s.group
        if traj.trainable:
            g.trainable += 1
            if g.trainable >= g.size:  # the group is complete: stragglers and spares are not needed
                for m in g.members:
                    if m.state in ("waiting", "running", "judging") and m.handle is not None and m is not s:
                        m.handle.cancel()

    # -- a run -----------------------------------------------------------------------------------

    def _plan(
        self, tasks: list[Task], group_size: int, run_id: str, seed: int, resume: bool
    ) -> list[SampleGroup]:
        nonce = "" if resume else uuid.uuid4().hex[:8]
        groups = []
        for ordinal, task in enumerate(tasks):
            # a group id names one group of one call (a resumed call continues the same groups)
            g = SampleGroup(task, f"{run_id}:{nonce + ':' if nonce else ''}{ordinal}:{task.id}", group_size)
            for i in range(group_size + self.config.spares):
                g.members.append(Sample(g, i, sample_id(run_id, nonce, seed, ordinal, task, i)))
            groups.append(g)
        return groups

    def _load_stored(self, r: RunState, samples: list[Sample]) -> None:
        """Resume: samples already stored are done (an ``infra_error`` one is tried again)."""
        assert self.store is not None
        stored = self.store.statuses([s.traj_id for s in samples])  # type: ignore[attr-defined]
        for s in samples:
            if s.traj_id not in stored:
                continue
            traj = self.store.get(s.traj_id)
            if traj.status == "infra_error":
                s.attempts, s.infra_errors = traj.attempts, list(traj.infra_errors)
                continue
            s.outcome, s.state = Outcome.of(traj), "done"
            s.traj = traj if r.keep else None
            r.stats.resumed += 1
            self._account(r, s, traj)

    async def run(
        self,
        tasks: list[Task],
        policy: Policy,
        group_size: int,
        *,
        run_id: str | None = None,
        seed: int = 0,
        priority: str = "train",
        resume: bool = False,
        keep_trajectories: bool = True,
    ) -> RolloutSummary:
        """Roll out every task ``group_size`` times. ``resume=True`` makes sample ids a function of
        (run_id, seed, tasks) and skips samples the store already holds for them.
        ``keep_trajectories=False`` keeps only counts in memory (``summary.trajectories`` is empty:
        read them from the store), for runs of thousands of rollouts."""
        if group_size < 1:
            raise ConfigError("group_size must be at least 1")
        if self.config.branch is not None:
            if self.runner is not None:
                raise ConfigError(
                    "forked rollouts (branch points) run in this process: use the local executor"
                )
            check_branchable(tasks)
        if resume and not run_id:
            raise ConfigError("resume needs the run id of the run to continue")
        rank = priority_rank(priority)
        c = self.config
        run_id = run_id or uuid.uuid4().hex[:12]
        t0 = time.perf_counter()
        self._resources()
        if not self._runs:
            self._stopping = False  # a stop ends the runs it found; a later run starts afresh
        r = RunState(
            run_id, policy, seed, keep_trajectories, SchedulerStats(requested=len(tasks) * group_size)
        )
        self.stats = r.stats  # what a progress display follows (the latest run)
        r.groups = self._plan(tasks, group_size, run_id, seed, resume)
        r.samples = [m for g in r.groups for m in g.members]
        self._runs.add(r)
        if resume and self.store is not None and hasattr(self.store, "statuses"):
            self._load_stored(r, r.samples)
        r.writer = BatchWriter(self.store) if self.store is not None else None
        try:
            await self._round(r, [s for s in r.samples if s.state == "waiting"], rank)
            for _ in range(c.replay_rounds):
                again = [s for s in r.samples if s.outcome is not None and s.outcome.status == "infra_error"]
                again = [s for s in again if s.group.trainable < s.group.size]
                if not again or self._stopping:
                    break
                for s in again:
                    s.state, s.traj, s.outcome = "waiting", None, None
                    r.stats.done -= 1
                    r.stats.failed -= 1
                r.stats.replayed += len(again)
                await self._round(r, again, priority_rank("replay"))
        finally:
            self._runs.discard(r)
            if r.writer is not None:
                await r.writer.close()
        return self._summary(r, t0)

    async def _round(self, r: RunState, samples: list[Sample], rank: int) -> None:
        for s in samples:
            s.handle = asyncio.ensure_future(self._run_sample(r, s, rank))
        handles = [s.handle for s in samples if s.handle is not None]
        if handles:
            await asyncio.gather(*handles, return_exceptions=True)
        for h in handles:
            if not h.cancelled() and h.exception() is not None:
                raise h.exception()  # type: ignore[misc]  # a store failure: loud, never silent

    def _summary(self, r: RunState, t0: float) -> RolloutSummary:
        finished = [s for s in r.samples if s.state == "done" and s.outcome is not None]
        done = [s.outcome for s in finished if s.outcome is not None]
        pending = [
            s for g in r.groups for s in g.members[: g.size] if s.state != "done" and g.trainable < g.size
        ]  # requested members of unfinished groups (spares are extra)
        judged = [t.reward for t in done if t.reward is not None]
        summary = RolloutSummary(
            requested=r.stats.requested,
            stored=len(done) if self.store is not None else 0,
            statuses=dict(Counter(t.status for t in done)),
            retried=r.stats.retried,
            reward_mean=sum(judged) / len(judged) if judged else 0.0,
            pass_rate=sum(1 for t in done if t.passed) / len(done) if done else 0.0,
            seconds=time.perf_counter() - t0,
            run_id=r.run_id,
            resumed=r.stats.resumed,
            replayed=r.stats.replayed,
            cancelled_spares=sum(1 for s in r.samples if s.state == "cancelled" and s.group.trainable >= s.group.size),
            interrupted=self._stopping,
            pending=len(pending) if self._stopping else 0,
            trajectories=[s.traj for s in [*finished, *r.branches] if s.traj is not None],
            branches=(dict(Counter(s.outcome.status for s in r.branches if s.outcome is not None))
                      if self.config.branch is not None else None),
        )  # fmt: skip
        if self.store is not None:
            with contextlib.suppress(Exception):
                doc = summary.to_json()
                doc["pending_ids"] = [s.traj_id for s in pending] if self._stopping else []
                self.store.finish_run(r.run_id, doc)
        return summary
