"""Closing a sandbox removes its cgroups even while their members are slow to leave (issue 14, load).

A clean clone's suite, run beside two other suites, left a sandbox's cgroups behind after ``close()``:
one kill pass ended, a SIGKILLed member had not finished exiting, rmdir said EBUSY and the error was
swallowed. These tests make members that die slowly (busy loops throttled by the group's CPU quota)
and a member in a cgroup made below the sandbox's, and check that teardown waits them out: every
directory gone, every member dead. The processes are plain shell loops and sleeps on the host, each
killed by the test at the end whatever happens.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from sparring.sandbox.isolation.cgroups import CgroupSet, cgroup_procs, empty_and_remove
from tests_support import ROOT_ONLY

pytestmark = ROOT_ONLY


def _group(cpus: float | None = None) -> CgroupSet:
    cg = CgroupSet.create(f"{os.getpid()}-teardown{uuid.uuid4().hex[:8]}", memory_mb=64, pids=64, cpus=cpus)
    if not cg.dirs:
        pytest.fail(f"no writable cgroup hierarchy here (degraded: {cg.degraded}): run the suite as root")
    return cg


def _join(proc: subprocess.Popen[bytes], dirs: list[Path]) -> bool:
    """Put ``proc`` into every one of ``dirs``; False if one refuses it."""
    try:
        for d in dirs:
            (d / "cgroup.procs").write_text(str(proc.pid))
    except OSError:
        return False
    return True


def test_teardown_waits_for_members_throttled_by_the_cpu_bound():
    """Busy members of a group whose CPU quota is spent cannot run, so cannot die, until the next
    period: with a 1 s period they outlast one kill pass (the cause of the leftover under load, where
    a sandbox's CPU bound and a busy host slow its dying processes the same way)."""
    cg = _group(cpus=1.0)
    dirs = list(cg.dirs.values())
    cpu = cg.dirs.get("cpu") or cg.dirs.get("cpu,cpuacct")
    if cpu is None or not (cpu / "cpu.cfs_quota_us").exists():
        pytest.fail(f"no cgroup v1 CPU controller here ({sorted(cg.dirs)}): this test needs one")
    (cpu / "cpu.cfs_period_us").write_text("1000000")
    (cpu / "cpu.cfs_quota_us").write_text("1000")
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(8)]
    try:
        for p in loops:
            assert _join(p, dirs)
        time.sleep(1.5)  # the quota is spent: the loops are throttled
        assert sorted(cg.pids()) == sorted(p.pid for p in loops), (
            "positive control: the loops sit in the group"
        )
        t0 = time.monotonic()
        cg.destroy()
        waited = time.monotonic() - t0
        assert [d for d in dirs if d.exists()] == [], f"cgroups left behind after destroy ({waited:.1f} s)"
        assert all(p.wait(timeout=10) == -9 for p in loops)  # killed by the teardown
    finally:
        for p in loops:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait(timeout=30)
        empty_and_remove(dirs, wait_s=5)


def test_teardown_removes_cgroups_made_below_the_sandbox_and_kills_their_members():
    cg = _group()
    dirs = list(cg.dirs.values())
    subs = [d / "child" for d in dirs]
    for s in subs:
        s.mkdir()
    p = subprocess.Popen(["sleep", "3600"])  # killed by the teardown, however slow the host
    try:
        assert _join(p, subs)
        assert all(p.pid in cgroup_procs(s) for s in subs), (
            "positive control: the process sits below the group"
        )
        assert not cg.pids(), "positive control: the sandbox's own cgroups list none of it"
        cg.destroy()
        assert [d for d in [*subs, *dirs] if d.exists()] == []
        assert p.wait(timeout=10) == -9  # killed by the teardown
    finally:
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        p.wait(timeout=10)
        empty_and_remove(dirs, wait_s=5)
