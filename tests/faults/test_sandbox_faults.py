"""Sandbox faults: a killed exec server, a killed bubblewrap, a hung server, a killed owner.

Each ends in a clear error for the affected sandbox only, and nothing is left
behind: no process, mount, cgroup or directory.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from tests_support import HANG_S, procs_with, wait_until


def run(coro):
    return asyncio.run(coro)


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _server_host_pid(sb) -> int:
    kids = _children(sb.channel.proc.pid)
    assert len(kids) == 1, kids
    return kids[0]


def _mounted_below(d: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [ln for ln in f if str(d) in ln]


def _leftovers(d: Path, cgroups: list[Path]) -> list[str]:
    out = []
    if d.exists():
        out.append(f"dir {d}")
    out += [f"mount {m.split()[4]}" for m in _mounted_below(d)]
    out += [f"cgroup {c}" for c in cgroups if c.exists()]
    return out


@pytest.mark.parametrize("victim", ["exec server", "bubblewrap"])
def test_killed_sandbox_fails_its_own_calls_only(backend, victim):
    async def body():
        sb = await backend.create(SandboxSpec(memory_mb=128))
        bystander = await backend.create(SandboxSpec())
        cgroups = list(sb.cg.dirs.values())
        try:
            running = asyncio.ensure_future(sb.exec("sleep 30", timeout=60))
            await asyncio.sleep(0.2)
            pid = _server_host_pid(sb) if victim == "exec server" else sb.channel.proc.pid
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(SandboxError, match=f"sandbox {sb.id}"):
                await asyncio.wait_for(running, HANG_S)
            assert not sb.healthy
            with pytest.raises(SandboxError, match="broken"):
                await sb.exec("true")
            ok = await bystander.exec("echo fine")
        finally:
            await sb.close()
            await bystander.close()
        return ok, sb.dir, cgroups

    ok, d, cgroups = run(body())
    assert ok.stdout == "fine\n"
    assert _leftovers(d, cgroups) == []


def test_hung_exec_server_is_detected_and_the_sandbox_killed(backend):
    async def body():
        sb = await backend.create(SandboxSpec())
        sb.kill_grace_s = 0.5
        try:
            os.kill(_server_host_pid(sb), signal.SIGSTOP)  # the server stops answering
            with pytest.raises(SandboxError, match="did not stop a timed-out command"):
                await sb.exec("true", timeout=0.5)
            assert not sb.healthy
        finally:
            await sb.close()
        return sb.dir

    d = run(body())
    assert _leftovers(d, []) == []


OWNER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from sparring.sandbox.base import SandboxSpec
    from sparring.sandbox.local.backend import LocalBackend

    async def main():
        b = LocalBackend(root=Path(sys.argv[1]))
        sbs = [await b.create(SandboxSpec(memory_mb=128, pids=64)) for _ in range(3)]
        for sb in sbs:
            await sb.exec(sys.argv[2] + " > /dev/null 2>&1 &")
            await sb.snapshot()
            print(sb.dir, *sb.cg.dirs.values(), flush=True)
        print("ready", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def test_owner_killed_with_sigkill_leaves_nothing(tmp_path):
    root = tmp_path / "sbroot"
    marker = f"sleep 7{os.getpid() % 1000}.{int(time.time() * 1000) % 1000}"
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(root), marker], stdout=subprocess.PIPE, text=True
    )
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "ready":
                break
            lines.append(line.split())
        # A background command can return before its child has exec'd the marker: wait for all three.
        running = wait_until(lambda: len(set(procs_with(marker)) - {proc.pid}) == 3)
        assert len(lines) == 3 and running
    finally:
        proc.kill()
        proc.wait()
    dirs = [Path(ln[0]) for ln in lines]
    cgroups = [Path(c) for ln in lines for c in ln[1:]]
    deadline = time.monotonic() + HANG_S  # the owner's watchdog reaps: poll, don't guess how long it takes
    left: list[str] = ["?"]
    while time.monotonic() < deadline:
        left = [x for d in dirs for x in _leftovers(d, [])] + [f"cgroup {c}" for c in cgroups if c.exists()]
        left += [f"process {p}" for p in procs_with(marker)]
        left += [f"snapshot records {p}" for p in (root / "snapshots").glob(str(proc.pid))]
        if not left:
            break
        time.sleep(0.1)
    assert left == []
