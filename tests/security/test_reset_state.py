"""Nothing survives reset: every writable place and every IPC object a rollout leaves is gone for the next.

The writable places are not a hard-coded list: the probe reads the sandbox's
own mount table and tries to create a file in every directory (to a bounded
depth) of every read-write mount. Each place found is filled, the IPC
namespace gets one object of every kind, and after ``reset`` (and after
``restore``) each place must list exactly what a fresh sandbox lists and the
namespace must be empty. The pool test shows why it matters: memory charged to
a leftover shared memory segment would make the next rollout run out.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
from pathlib import Path

import pytest
from sec_support import in_sandbox

from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation import ipcns
from sparring.sandbox.pool import SandboxPool
from tests_support import ROOT_ONLY

# Runs inside the sandbox. `survey`: {writable dir: sorted entries below it (same mount, depth <= 2)}
# plus the IPC objects; `fill`: a marker file in every writable dir and one IPC object of each kind.
PROBE = r"""
import ctypes, json, os, sys
MARK = "sparring-leftover"

def rw_mounts():
    out = []
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if "rw" in f[5].split(",") and os.path.isdir(f[4]):
            out.append(f[4].replace("\\040", " "))
    return sorted(set(out))

def dirs_in(top, depth=2, cap=300):
    dev, todo, seen = os.stat(top).st_dev, [(top, 0)], []
    while todo and len(seen) < cap:
        d, k = todo.pop()
        seen.append(d)
        if k >= depth:
            continue
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_dev == dev:
                        todo.append((e.path, k + 1))
        except OSError:
            pass
    return seen

def writable(d):
    p = os.path.join(d, ".sparring-probe-%d" % os.getpid())
    try:
        os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return False
    os.unlink(p)
    return True

def places():
    return sorted({d for m in rw_mounts() for d in dirs_in(m) if writable(d)})

def listing(d):
    out = []
    for root, dirs, files in os.walk(d):
        out += [os.path.relpath(os.path.join(root, n), d) for n in dirs + files]
    return sorted(out)

def ipc():
    kinds = {k: len(open("/proc/sysvipc/" + k).read().splitlines()) - 1 for k in ("shm", "sem", "msg")}
    kinds["mqueue"] = len(os.listdir("/dev/mqueue"))
    return kinds

libc = ctypes.CDLL(None, use_errno=True)
mode = sys.argv[1]
if mode == "survey":
    ps = places()
    print(json.dumps({"places": {d: listing(d) for d in ps}, "ipc": ipc()}))
elif mode == "fill":
    for d in places():
        fd = os.open(os.path.join(d, MARK), os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            os.write(fd, b"x" * 100)
        except OSError:  # a file that takes no bytes (in /dev/mqueue it is a queue): created is enough
            pass
        os.close(fd)
    assert libc.shmget(0x5ba1, 1 << 20, 0o1600) >= 0, ctypes.get_errno()
    assert libc.semget(0x5ba2, 2, 0o1600) >= 0, ctypes.get_errno()
    assert libc.msgget(0x5ba3, 0o1600) >= 0, ctypes.get_errno()
    assert libc.mq_open(b"/sparring-leftover-q", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0, ctypes.get_errno()
    print("filled")
"""

# Runs inside the sandbox: a System V segment of argv[1] MiB, every page touched (charged to the sandbox's
# memory cgroup), left behind when the process exits.
SEGMENT = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = int(sys.argv[1]) << 20
sid = libc.shmget(0x5ba4, ctypes.c_size_t(size), 0o1600)
assert sid >= 0, ctypes.get_errno()
addr = libc.shmat(sid, None, 0)
assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
ctypes.memset(addr, 1, size)
print("segment", sid)
"""
ALLOCATE = (
    "import sys; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated')"
)


async def _survey(sb) -> dict:
    r = await sb.exec(["python3", "-c", PROBE, "survey"], cwd="/", timeout=60)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


async def _fill(sb) -> None:
    r = await sb.exec(["python3", "-c", PROBE, "fill"], cwd="/", timeout=60)
    assert r.exit_code == 0 and r.stdout == "filled\n", r.stderr


@ROOT_ONLY
def test_reset_and_restore_return_every_writable_place_and_ipc_object_to_the_start(backend):
    async def body(sb):
        fresh = await _survey(sb)
        snap = await sb.snapshot()
        await _fill(sb)
        dirty = await _survey(sb)
        await sb.reset()
        after_reset = await _survey(sb)
        await _fill(sb)
        await sb.restore(snap)
        after_restore = await _survey(sb)
        return fresh, dirty, after_reset, after_restore

    fresh, dirty, after_reset, after_restore = in_sandbox(backend, SandboxSpec(disk_mb=64), body)
    places = set(fresh["places"])
    # the enumeration finds the places a rollout can write (and only those: / and /dev are read-only)
    assert {"/workspace", "/tmp", "/home/agent", "/dev/shm", "/dev/mqueue"} <= places, places
    assert not places & {"/", "/dev", "/proc", "/etc", "/usr"}, places
    assert fresh["ipc"] == {"shm": 0, "sem": 0, "msg": 0, "mqueue": 0}
    # positive control: the fill is visible in every place and every IPC kind before reset
    for d in places:
        assert "sparring-leftover" in dirty["places"][d], d
    assert all(n >= 1 for n in dirty["ipc"].values()), dirty["ipc"]
    assert after_reset == fresh
    assert after_restore == fresh


@ROOT_ONLY
def test_the_next_rollout_gets_the_memory_a_leftover_segment_held(backend):
    spec = SandboxSpec(memory_mb=160, disk_mb=256)

    async def body():
        pool = SandboxPool(backend, max_idle=1)
        try:
            a = await pool.acquire_spec(spec)
            seg = await a.exec(["python3", "-c", SEGMENT, "110"], timeout=60)
            shm_file = await a.exec("head -c 20m /dev/zero > /dev/shm/leftover && echo wrote", timeout=60)
            # positive control: the segment and the file hold their memory after their writers exited
            control = await a.exec(["python3", "-c", ALLOCATE, "80"], timeout=60)
            await pool.release(a)
            b = await pool.acquire_spec(spec)
            after = await b.exec(["python3", "-c", ALLOCATE, "80"], timeout=60)
            left = await b.exec("cat /proc/sysvipc/shm | wc -l; ls /dev/shm")
            await pool.release(b)
            return a.id, b.id, seg, shm_file, control, after, left
        finally:
            await pool.close()

    a, b, seg, shm_file, control, after, left = asyncio.run(body())
    assert seg.exit_code == 0 and seg.stdout.startswith("segment"), seg.stderr
    assert shm_file.stdout == "wrote\n"
    assert control.oom_killed and "allocated" not in control.stdout
    assert a == b  # the same sandbox, reused
    assert not after.oom_killed and after.stdout == "allocated\n", after.stderr
    assert left.stdout == "1\n"  # the header line of /proc/sysvipc/shm only; /dev/shm empty


@ROOT_ONLY
@pytest.mark.parametrize("how", ["by pid", "held"])
def test_the_host_thread_that_empties_a_sandbox_ipc_namespace_comes_back_to_its_own(backend, how):
    """The reset's IPC clearing enters the sandbox's IPC namespace from the host's own thread: it must be
    back in its own namespace after, and remove nothing of the host's (a host segment survives). ``held``:
    through descriptors opened once (what a reset uses), whose lists show the sandbox's objects though
    read from the host's namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.readlink(ipcns.SELF)
    host_seg = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE, in the host's namespace
    assert host_seg >= 0, ctypes.get_errno()
    try:

        async def body(sb):
            await _fill(sb)
            dirty = await _survey(sb)
            if how == "by pid":
                removed = ipcns.clear(sb.server_host_pid())
            else:
                held = ipcns.HeldNamespace(sb.server_host_pid())
                try:
                    assert all(held.ids(k) for k in ("shm", "sem", "msg"))  # it shows the fill
                    removed = held.clear()
                    # empty while the host's segment exists (checked below): the sandbox's lists, not ours
                    assert not any(held.ids(k) for k in ("shm", "sem", "msg"))
                finally:
                    held.close()
            after = await _survey(sb)
            return dirty, removed, after

        dirty, removed, after = in_sandbox(backend, SandboxSpec(disk_mb=64), body)
        assert all(n >= 1 for n in dirty["ipc"].values()), dirty["ipc"]  # positive control: filled
        assert all(removed[k] >= 1 for k in ("shm", "sem", "msg", "mqueue")), removed
        assert after["ipc"] == {"shm": 0, "sem": 0, "msg": 0, "mqueue": 0}
        assert os.readlink(ipcns.SELF) == own  # the calling thread is home again
        ids = [line.split()[1] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
        assert str(host_seg) in ids  # the host's own segment untouched
    finally:
        libc.shmctl(host_seg, ipcns.IPC_RMID, None)
