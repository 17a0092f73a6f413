"""A reset swaps in a writable tmpfs made ahead (local/sandbox.py, ``_make_spare``): the sandbox still
gets a fresh /tmp, $HOME, /dev/shm and workspace with its disk quota, and no tmpfs is left behind."""

from __future__ import annotations

import asyncio

from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation import mounts
from sparring.sandbox.local.backend import LocalBackend
from tests_support import ROOT_ONLY

FILL = "echo x > /tmp/mark; echo y > /dev/shm/mark; echo z > ~/mark; head -c 40m /dev/zero > /workspace/big 2>&1; echo exit=$?"
LOOK = "ls -A /tmp /dev/shm ~ /workspace | tr '\\n' ' '; df -m /workspace | tail -1 | awk '{print $2}'"


@ROOT_ONLY
def test_resets_swap_in_a_fresh_tmpfs_made_ahead_with_the_quota_and_leak_none():
    async def body():
        backend = LocalBackend(prefork=0)
        sb = await backend.create(SandboxSpec(disk_mb=16))
        try:
            fresh = (await sb.exec(LOOK)).stdout
            rounds = []
            for _ in range(5):
                filled = (await sb.exec(FILL)).stdout
                await sb.reset()
                await asyncio.sleep(0)  # the loop is free: the next spare is made
                live = sb.rw.name
                below = mounts.mounts_below(sb.dir)
                rw_mounts = sorted(p.name for p in below if p.parent == sb.dir and p.name.startswith("rw"))
                rounds.append((filled, live, rw_mounts, (await sb.exec(LOOK)).stdout))
            return fresh, rounds
        finally:
            await sb.close()
            await backend.aclose()

    fresh, rounds = asyncio.run(body())
    assert fresh.split()[-1] == "16", fresh  # the quota: a 16 MB workspace
    for filled, _, rw_mounts, after in rounds:
        assert "exit=1" in filled  # positive control: 40 MB do not fit in the 16 MB quota
        assert after == fresh  # /tmp, /dev/shm, ~ and the workspace as new, the same quota
        assert rw_mounts == ["rw", "rw2"], rw_mounts  # the live one and one spare, no more
    assert [r[1] for r in rounds[1:]] != [rounds[1][1]] * 4  # the live tmpfs alternates: spares were used


@ROOT_ONLY
def test_a_reset_right_after_a_restore_still_swaps_in_a_spare():
    """A restore that found no spare makes the next one at once: the reset that follows without the
    loop ever running between them (as a judge restores, then the pool resets) swaps it in, instead of
    making its own at the path it just unmounted. The live tmpfs's name tells which happened."""

    async def body():
        backend = LocalBackend(prefork=0)
        sb = await backend.create(SandboxSpec(disk_mb=16))
        try:
            await sb.exec("echo a > /workspace/a")
            snap = await sb.snapshot()
            await sb.exec("echo b > /workspace/b")
            await sb.restore(snap)  # the first remount: no spare was made yet
            after_restore = sb.rw
            await sb.reset()  # no await between: a spare made "when the loop is free" would not be there
            after_reset = sb.rw
            rw_mounts = sorted(p.name for p in mounts.mounts_below(sb.dir) if p.parent == sb.dir)
            look = (await sb.exec("ls -A /workspace /tmp | tr '\\n' ' '")).stdout
            return after_restore, after_reset, rw_mounts, look
        finally:
            await sb.close()
            await backend.aclose()

    after_restore, after_reset, rw_mounts, look = asyncio.run(body())
    assert after_reset != after_restore  # the reset took the spare
    assert [n for n in rw_mounts if n.startswith("rw")] in (["rw"], ["rw2"], ["rw", "rw2"]), rw_mounts
    assert "a" not in look.split() and "b" not in look.split(), look  # and it is a reset all the same


@ROOT_ONLY
def test_a_create_makes_its_mounts_off_the_event_loop():
    """The mounts and cgroups of a cold create are made in a worker thread, so the event loop keeps
    serving other sandboxes meanwhile: the sandbox's own tmpfs, its writable tmpfs and the root's binds
    are mounted from a thread other than the loop's (only /dev/shm's bind comes after bubblewrap started,
    on the loop)."""
    import threading

    seen: list[str] = []
    real = mounts.mount

    def spy(*a, **k):
        seen.append((threading.current_thread().name, str(a[1])))
        return real(*a, **k)

    async def body():
        backend = LocalBackend(prefork=0)
        mounts.mount = spy
        try:
            sb = await backend.create(SandboxSpec())
        finally:
            mounts.mount = real
        try:
            return threading.current_thread().name, (await sb.exec("echo ok")).stdout, str(sb.dir)
        finally:
            await sb.close()
            await backend.aclose()

    loop_thread, out, sb_dir = asyncio.run(body())
    assert out == "ok\n"
    before_bwrap = [(t, target) for t, target in seen if not target.endswith("/shm")]
    targets = {target for _, target in before_bwrap}
    assert sb_dir in targets and f"{sb_dir}/rw" in targets, seen  # the spy saw the create's mounts
    assert all(t != loop_thread for t, _ in before_bwrap), seen
