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
