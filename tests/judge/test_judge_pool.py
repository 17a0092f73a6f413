"""The warm judge pool: sandboxes reused across judgements with a full reset, same verdicts as fresh ones."""

from __future__ import annotations

import asyncio

import pytest

from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.judge.runner.sandbox import JudgePool
from sparring.sandbox.base import SandboxSpec, WorkspaceDiff
from sparring.tasks.attacks import HACKS
from sparring.tasks.loader import solution_diff

# Leaves traces everywhere a later judgement could see them: /tmp, the home directory, the workspace,
# and a background process that outlives the test run.
LITTER = b"""\
import os
import subprocess

for _p in ("/tmp/leak", os.path.expanduser("~/leak"), "/workspace/extra.txt"):
    try:
        open(_p, "w").write("x")
    except OSError:
        pass
subprocess.Popen(["sleep", "300"], start_new_session=True)


def clip_sum(xs, lo, hi):
    return sum(min(max(x, lo), hi) for x in xs)
"""
# Correct only in a clean sandbox: any trace of an earlier judgement makes it wrong.
DETECT = """\
import os


def _dirty():
    if any(os.path.exists(p) for p in ("/tmp/leak", os.path.expanduser("~/leak"), "/workspace/extra.txt")):
        return True
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"sleep"):
                return True
        except OSError:
            pass
    return False


_DIRTY = _dirty()
"""
CLEAN_ONLY = (
    DETECT
    + "\n\ndef clip_sum(xs, lo, hi):\n    r = sum(min(max(x, lo), hi) for x in xs)\n    return r + 1 if _DIRTY else r\n"
).encode()


def test_pooled_judgements_see_nothing_of_earlier_ones(backend, dynamic_task):
    if getattr(backend, "mode", "") != "overlay":
        pytest.skip("the pool is used only where reset discards everything (overlay mode)")
    cfg = JudgeConfig(dynamic_seed=3, shuffle_seed=3)

    async def go():
        pool = JudgePool(backend, max_idle=1)
        try:
            judge = PytestJudge(backend, config=cfg, pool=pool)
            litter = await judge.score(dynamic_task, WorkspaceDiff(files={"solution.py": LITTER}))
            clean = await judge.score(dynamic_task, WorkspaceDiff(files={"solution.py": CLEAN_ONLY}))
            return litter, clean, pool.max_alive, pool.judgements
        finally:
            await pool.close()

    litter, clean, alive, n = asyncio.run(go())
    assert n == 2 and alive == 1  # the second judgement ran in the first one's (reset) sandbox
    assert litter.components["hidden_all_pass"] == 1.0
    assert clean.reward == 1.0, (clean.components, clean.log[-500:])


def test_the_detector_sees_litter(backend, dynamic_task):
    """Control: in a sandbox that was not reset, the clean-only solution does notice every trace."""

    async def go():
        sb = await backend.create(SandboxSpec(workspace=dynamic_task.workspace))
        try:
            await sb.write_file("solution.py", LITTER)
            await sb.exec(["python", "-c", "import solution"], timeout=30)
            await sb.write_file("solution.py", CLEAN_ONLY)
            r = await sb.exec(["python", "-c", "import solution; print(solution._DIRTY)"], timeout=30)
            await sb.reset()
            await sb.write_file("solution.py", CLEAN_ONLY)
            after = await sb.exec(["python", "-c", "import solution; print(solution._DIRTY)"], timeout=30)
            return r.stdout.strip(), after.stdout.strip()
        finally:
            await sb.close()

    before, after = asyncio.run(go())
    assert before == "True"
    if getattr(backend, "mode", "") == "overlay":
        assert after == "False"


def test_pool_and_fresh_sandboxes_agree(backend, family_tasks):
    cfg = JudgeConfig(dynamic_seed=4, shuffle_seed=4)
    cases = []
    for name in ("code-repair", "function-impl"):
        t = family_tasks[name]
        cases += [(t, solution_diff(t)), (t, WorkspaceDiff()), (t, HACKS["conftest_forces_pass"](t)),
                  (t, HACKS["exit_zero_at_import"](t)), (t, solution_diff(t))]  # fmt: skip

    async def go():
        fresh = PytestJudge(backend, config=cfg)
        pool = JudgePool(backend, max_idle=1)
        try:
            pooled = PytestJudge(backend, config=cfg, pool=pool)
            a = [await fresh.score(t, d) for t, d in cases]
            b = [await pooled.score(t, d) for t, d in cases]
            return a, b, pool.max_alive, pool.warm_launches
        finally:
            await pool.close()

    a, b, alive, warm = asyncio.run(go())
    for x, y in zip(a, b, strict=True):
        assert (x.reward, x.flags, x.per_test) == (y.reward, y.flags, y.per_test)
    assert [r.reward for r in b].count(1.0) == 4
    if getattr(backend, "mode", "") == "overlay":
        assert alive <= 2  # one per task, reused
        assert warm >= len(cases) - 2  # every judgement but each task's first ran a prestarted launcher


def test_reference_outputs_beside_the_candidate_agree_with_the_sequential_path(backend, dynamic_task):
    """In the pool, the reference's dynamic outputs come from a reference sandbox (one no candidate ever
    ran in) while the candidate runs; verdicts are those of a fresh sandbox per judgement, hacks and
    crashes included."""
    t = dynamic_task
    cfg = JudgeConfig(dynamic_seed=5, shuffle_seed=5)
    cases = [solution_diff(t), WorkspaceDiff(), HACKS["exit_zero_at_import"](t), solution_diff(t),
             WorkspaceDiff(files={"solution.py": LITTER}), solution_diff(t), HACKS["conftest_forces_pass"](t)]  # fmt: skip

    async def go():
        fresh = PytestJudge(backend, config=cfg)
        pool = JudgePool(backend, max_idle=2)
        try:
            pooled = PytestJudge(backend, config=cfg, pool=pool)
            # Two judgements at once leave two warm sandboxes of the task in the pool.
            await asyncio.gather(pooled.score(t, solution_diff(t)), pooled.score(t, solution_diff(t)))
            a = [await fresh.score(t, d) for d in cases]
            b = [await pooled.score(t, d) for d in cases]
            return a, b, pool.max_alive, pool.reference_runs
        finally:
            await pool.close()

    a, b, alive, beside = asyncio.run(go())
    for x, y in zip(a, b, strict=True):
        assert (x.reward, x.flags, x.per_test) == (y.reward, y.flags, y.per_test)
    assert [r.reward for r in b].count(
        1.0
    ) == 4  # the reference twice, the littering one (it is right), again
    if getattr(backend, "mode", "") == "overlay":
        assert alive == 2  # two candidate sandboxes (two judgements at once), the references' apart
        assert beside >= len(cases) - 1  # (the exit-at-import hack's judgement may end before it is needed)


def test_launchers_of_sandboxes_the_pool_evicted_are_not_kept(backend, family_tasks):
    """A bounded pool evicts idle sandboxes of other tasks; their unused launchers go with them, so a long
    run over many tasks holds at most one prestarted launcher per live sandbox."""
    if getattr(backend, "mode", "") != "overlay":
        pytest.skip("the pool is used only where reset discards everything (overlay mode)")
    cfg = JudgeConfig(dynamic_seed=6, shuffle_seed=6)
    tasks = [family_tasks["clamp"], family_tasks["code-repair"], family_tasks["clamp"]]

    async def go():
        pool = JudgePool(backend, max_idle=1, max_size=1)
        try:
            judge = PytestJudge(backend, config=cfg, pool=pool)
            rewards, held = [], []
            for t in tasks:
                rewards.append((await judge.score(t, solution_diff(t))).reward)
                held.append(len(pool._warm))
            return rewards, held
        finally:
            await pool.close()

    rewards, held = asyncio.run(go())
    assert rewards == [1.0, 1.0, 1.0]
    assert max(held) <= 1, held


def test_announced_judgements_get_launchers_and_nothing_else_does(backend, family_tasks):
    """Once judgements are announced (the scheduler does it as each rollout starts), a reset sandbox gets a
    launcher only while more judgements of its task are expected than launchers wait, and an announcement
    readies an idle sandbox of its task; a task judged for the last time leaves no launcher behind."""
    if getattr(backend, "mode", "") != "overlay":
        pytest.skip("the pool is used only where reset discards everything (overlay mode)")
    t = family_tasks["clamp"]
    cfg = JudgeConfig(dynamic_seed=7, shuffle_seed=7)

    async def go():
        pool = JudgePool(backend, max_idle=2)
        try:
            judge = PytestJudge(backend, config=cfg, pool=pool)
            seen = []

            def state():
                waiting = sum(1 for w in pool._warm.values() if w.alive)
                seen.append((pool.prestarts, pool.warm_launches, waiting))

            judge.expect(t, 2)
            rewards = [(await judge.score(t, solution_diff(t))).reward]
            state()  # made for the first (its launcher used), reset with one more expected: one waits
            rewards.append((await judge.score(t, WorkspaceDiff())).reward)
            state()  # the second used it; nothing more expected: the reset left none
            judge.expect(t)
            state()  # the announcement readied the idle sandbox
            rewards.append((await judge.score(t, solution_diff(t))).reward)
            state()
            judge.expect(t, 1)
            judge.expect(t, -1)  # announced, then withdrawn (a rollout that ended in an infrastructure fault)
            expected = dict(pool._expected)
            return rewards, seen, expected
        finally:
            await pool.close()

    rewards, seen, expected = asyncio.run(go())
    assert rewards == [1.0, 0.0, 1.0]
    assert seen == [(2, 1, 1), (2, 2, 0), (3, 2, 1), (3, 3, 0)], seen
    assert expected == {}


def test_a_scheduled_run_leaves_no_launcher_unused(backend, family_tasks, tmp_path):
    """The rollout scheduler announces each sample's judgement: over a run of several tasks and groups,
    every launcher the pool started ran a judgement (without the announcements, each reset started one,
    and the last resets of every task left theirs unused)."""
    if getattr(backend, "mode", "") != "overlay":
        pytest.skip("the pool is used only where reset discards everything (overlay mode)")
    from sparring.policy.scripted import OraclePolicy
    from sparring.rollout.scheduler import RolloutScheduler
    from sparring.sandbox.pool import SandboxPool

    tasks = [family_tasks["clamp"], family_tasks["code-repair"], family_tasks["function-impl"]]

    async def go(announce: bool):
        pool = JudgePool(backend, max_idle=2)
        sandboxes = SandboxPool(backend, max_idle=4)
        try:
            judge = PytestJudge(backend, pool=pool)
            if not announce:
                judge.expect = None  # type: ignore[method-assign]  # a judge that takes no notice
            sched = RolloutScheduler(sandboxes, judge, None, concurrency=3)
            summary = await sched.run(tasks, OraclePolicy(), group_size=3)
            return [t.reward for t in summary.trajectories], pool.prestarts, pool.warm_launches
        finally:
            await pool.close()
            await sandboxes.close()

    rewards, prestarts, used = asyncio.run(go(announce=True))
    assert rewards == [1.0] * 9
    assert prestarts == used, (prestarts, used)
    rewards, prestarts, used = asyncio.run(go(announce=False))
    assert rewards == [1.0] * 9 and prestarts > used, (prestarts, used)
