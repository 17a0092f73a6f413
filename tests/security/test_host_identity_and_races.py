"""Host identity and race guarantees: each of these once failed on the local sandbox.

No host environment inside; the agent is never host root (so host sysctls and
device nodes are not its own); every byte written counts against the quota;
a timed-out command is dead when exec returns; diff() never follows a
directory swapped for a symlink.

Each test is a real attack (bounded, scratch paths only, never a harmful write:
write permission is probed with access(2) or an open that is closed unwritten).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from sec_support import CANARY_TEXT, in_sandbox, unique_sleep_arg

from sparring.sandbox.base import SandboxSpec
from tests_support import HANG_S, ROOT_ONLY, procs_with


def test_host_environment_does_not_leak_in(backend, monkeypatch):
    # bubblewrap's own process (pid 1 inside) keeps the environment it was started with.
    monkeypatch.setenv("SPARRING_HOST_SECRET", "host-secret-value")

    async def body(sb):
        return await sb.exec("env; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null")

    r = in_sandbox(backend, SandboxSpec(env={"VISIBLE": "yes"}), body)
    assert "VISIBLE=yes" in r.stdout  # the spec's environment does get in
    assert "host-secret-value" not in r.stdout and "SPARRING_HOST_SECRET" not in r.stdout


PRIVILEGE_PROBE = r"""
import json, os
uid_map = [line.split() for line in open("/proc/self/uid_map")]
out = {
    "host_uids": [int(outside) for inside, outside, count in uid_map if int(inside) == os.getuid()],
    "proc_sys_ro": bool(os.statvfs("/proc/sys").f_flag & os.ST_RDONLY),
    # access(2) only asks; nothing is written
    "writable_sysctls": [p for p in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe",
                                      "/proc/sys/vm/drop_caches", "/proc/sys/kernel/printk_ratelimit")
                         if os.path.exists(p) and os.access(p, os.W_OK)],
    "own_host_device_nodes": [n for n in ("null", "zero", "full", "random", "urandom", "tty")
                              if os.stat("/dev/" + n).st_uid == os.getuid()],
}
print(json.dumps(out))
"""


def _host_uids(pid: int) -> set[int]:
    """Real, effective, saved and fs uid of host process ``pid``, as the host sees them."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return {int(x) for x in line.split()[1:]}
    raise AssertionError(f"no Uid line for {pid}")


def test_agent_uid_is_not_host_root(backend):
    # bwrap started by root maps the agent's uid to host uid 0: every uid-based check the kernel
    # makes (sysctl write permission, inode ownership for chmod) then treats the agent as host root.
    # Authoritative: the uids the host sees for the sandbox's processes (a command left running too).
    async def body(sb):
        await sb.exec("sleep 30 >/dev/null 2>&1 &")
        server = sb.server_host_pid()
        procs = [server] + [
            int(x) for x in Path(f"/proc/{server}/task/{server}/children").read_text().split()
        ]
        probe = json.loads((await sb.exec(["python3", "-c", PRIVILEGE_PROBE])).stdout)
        return {p: _host_uids(p) for p in procs}, probe

    uids, probe = in_sandbox(backend, SandboxSpec(), body)
    assert len(uids) >= 2 and all(0 not in u for u in uids.values()), uids
    if backend.overlay:  # as root the map's parent is the host; without root it is bubblewrap's own userns
        assert 0 not in probe["host_uids"], probe


def test_host_sysctls_are_read_only(backend):
    async def body(sb):
        return await sb.exec(["python3", "-c", PRIVILEGE_PROBE])

    out = json.loads(in_sandbox(backend, SandboxSpec(), body).stdout)
    assert out["proc_sys_ro"], out
    assert out["writable_sysctls"] == [], out


def test_host_device_nodes_are_not_owned_by_the_agent(backend):
    # the owner of an inode may chmod it: owning the host's /dev/null lets the agent break it for the host
    async def body(sb):
        return await sb.exec(["python3", "-c", PRIVILEGE_PROBE])

    out = json.loads(in_sandbox(backend, SandboxSpec(), body).stdout)
    assert out["own_host_device_nodes"] == [], out


@ROOT_ONLY
def test_scratch_directories_count_against_the_disk_quota(backend):
    # at most 32 MiB per directory with an 8 MiB quota
    async def body(sb):
        return await sb.exec(
            "for d in /tmp /home/agent /dev/shm; do "
            "dd if=/dev/zero of=$d/fill bs=1M count=32 2>/dev/null; echo $d $(stat -c %s $d/fill); rm -f $d/fill; done",
            timeout=30,
        )

    r = in_sandbox(backend, SandboxSpec(disk_mb=8), body)
    sizes = {line.split()[0]: int(line.split()[1]) for line in r.stdout.splitlines()}
    assert set(sizes) == {"/tmp", "/home/agent", "/dev/shm"}, r.stdout + r.stderr
    assert all(size <= 8 << 20 for size in sizes.values()), sizes


def test_no_process_survives_the_moment_a_timed_out_exec_returns(backend):
    # A process still running after exec returned can still write the workspace the judge reads.
    async def body(sb):
        survivors = []
        for _ in range(8):  # the window is a few ms: try several times
            m = unique_sleep_arg()
            r = await sb.exec(
                f"setsid sleep {m} >/dev/null 2>&1 & nohup sleep {m} >/dev/null 2>&1 & sleep {m}", timeout=1
            )
            assert r.timed_out
            survivors += procs_with(m)
        return survivors

    assert in_sandbox(backend, SandboxSpec(), body) == []


FLIP = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
target, end = sys.argv[1], time.monotonic() + 3
os.chdir("/workspace")
os.mkdir("a")
with open("a/canary.txt", "w") as f:  # the same name as the host file: the walk lists it here...
    f.write("harmless")
os.symlink(os.path.dirname(target), "b")  # ...and reads it through the swapped-in link
for i in range(2000000):
    if i % 1000 == 0 and time.monotonic() > end:
        break
    if libc.renameat2(-100, b"a", -100, b"b", 2) != 0:  # RENAME_EXCHANGE: a <-> b atomically
        sys.exit("renameat2: errno %d" % ctypes.get_errno())
"""


def test_diff_does_not_follow_a_directory_swapped_for_a_symlink(backend, canary):
    # Inside: swap /workspace/a between a real directory and a link to the host canary's directory
    # (for 3 s at most) while the host takes diffs: a walk that lists a/ and then reads a/canary.txt by
    # path follows the link if it was swapped in between.
    flipper = ["python3", "-c", FLIP, str(canary)]

    async def body(sb):
        flip = asyncio.ensure_future(sb.exec(flipper, timeout=HANG_S))  # it stops itself after 3 s
        leaked, diffs = [], 0
        while not flip.done() and diffs < 3000:
            try:
                d = await sb.diff()
                leaked += [k for k, v in d.files.items() if CANARY_TEXT.encode() in v]
            except OSError:
                pass
            diffs += 1
        r = await flip
        assert r.exit_code == 0 and not r.timed_out, r.stderr
        return leaked, diffs

    leaked, diffs = in_sandbox(backend, SandboxSpec(), body)
    assert diffs > 10
    assert leaked == [], f"host file content entered the diff via {set(leaked)}"
    assert os.path.exists(canary)
