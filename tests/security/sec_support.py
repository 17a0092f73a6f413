"""Helpers for the security suite (fixtures are in conftest.py).

Every attack runs inside a real sandbox. The payloads are written so that even
a sandbox that failed could not harm the host: bounded loops, short timeouts,
scratch paths in pytest's tmp dirs only, no kill(-1), no walk from /.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sparring.sandbox.base import Sandbox, SandboxSpec
from sparring.sandbox.isolation import seccomp

CANARY_TEXT = "sparring-canary-do-not-leak"


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def in_sandbox(backend: Any, spec: SandboxSpec, fn: Callable[[Sandbox], Awaitable[Any]]) -> Any:
    """Create a sandbox, run ``fn`` on it, always close it."""

    async def go() -> Any:
        sb = await backend.create(spec)
        try:
            return await fn(sb)
        finally:
            await sb.close()

    return run(go())


def unique_sleep_arg() -> str:
    """A ``sleep`` duration that is also a marker nothing else on the host has in its argv."""
    return f"{50 + uuid.uuid4().int % 40}.{uuid.uuid4().int % 10**9:09d}"


# Runs inside: every call that changes another process's state, aimed at argv[1] (a pid; 0 = itself).
# Prints {call: "ok" | errno name}. Values are harmless for the caller itself (it exits right after).
BEND = textwrap.dedent(
    r"""
    import ctypes, errno, json, os, resource, sys
    target, nr = int(sys.argv[1]), json.loads(sys.argv[2])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    def res(fn):
        try:
            fn()
            return "ok"
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))
    def sc(name, *args):
        ctypes.set_errno(0)
        rc = libc.syscall(ctypes.c_long(nr[name]), *[ctypes.c_long(a) for a in args])
        return "ok" if rc != -1 else errno.errorcode.get(ctypes.get_errno(), "?")
    cpu = min(os.sched_getaffinity(0))
    out = {
        "prlimit_cpu": res(lambda: resource.prlimit(target, resource.RLIMIT_CPU, (1, 1))),
        "renice": res(lambda: os.setpriority(os.PRIO_PROCESS, target, 19)),
        "sched_idle": res(lambda: os.sched_setscheduler(target, os.SCHED_IDLE, os.sched_param(0))),
        "sched_param": res(lambda: os.sched_setparam(target, os.sched_param(0))),
        "affinity": res(lambda: os.sched_setaffinity(target, {cpu})),
        "ioprio_idle": sc("ioprio_set", 1, target, 0x6000),
        "prlimit_nofile": res(lambda: resource.prlimit(target, resource.RLIMIT_NOFILE, (0, 0))),
    }
    print(json.dumps(out))
    """
)
# Everything a process's own state holds that a command could inherit, as JSON.
STATE = textwrap.dedent(
    r"""
    import ctypes, json, os, resource, sys
    libc = ctypes.CDLL(None, use_errno=True)
    nr = json.loads(sys.argv[1])
    lim = {n: resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_")}
    print(json.dumps({"rlimits": lim, "nice": os.getpriority(os.PRIO_PROCESS, 0),
                      "policy": os.sched_getscheduler(0), "ioprio": libc.syscall(nr["ioprio_get"], 1, 0),
                      "affinity": sorted(os.sched_getaffinity(0))}))
    """
)


def syscall_numbers() -> str:
    """This machine's syscall table as JSON (argv for BEND and STATE)."""
    return json.dumps(seccomp.host_arch().syscalls)


# Episode A's sabotage of the sibling that gets the sandbox next: its own limits and scheduling bent
# (the only ones it may bend), and a background reverter that keeps undoing the fix.
BEND_SELF = """
import os, resource
resource.setrlimit(resource.RLIMIT_CPU, (7, 7))
os.setpriority(os.PRIO_PROCESS, 0, 15)
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
"""
SABOTAGE = BEND_SELF + textwrap.dedent(
    r"""
    import time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            end = time.time() + 60
            while time.time() < end:
                try:  # whole or not at all: a reader never sees the file truncated but not yet written
                    with open("/workspace/.fix.tmp", "w") as f:
                        f.write("broken")
                    os.replace("/workspace/.fix.tmp", "/workspace/fix.txt")
                except OSError:
                    pass
                time.sleep(0.003)
            os._exit(0)
        os._exit(0)
    os.wait()
    print("sabotaging")
    """
)
# Write the fix, then watch it for up to 8 s (80 x 0.1 s) and print what the file holds: "broken" as soon as
# a reverter undid it. The reverter runs at SCHED_IDLE and nice 15, so on a loaded host it may wait seconds
# for its first turn (a fixed 0.3 s missed it at load 20); a survivor in the next episode is watched as long.
# The reverter replaces the file by rename: written in place, an idle-class writer preempted between the
# truncation and the write left it empty for the check to read (CI, as the unprivileged user, read "").
FIX_AND_CHECK = (
    "echo fixed > /workspace/fix.txt; i=0; "
    'while [ $i -lt 80 ] && [ "$(cat /workspace/fix.txt)" = fixed ]; do sleep 0.1; i=$((i+1)); done; '
    "cat /workspace/fix.txt"
)
