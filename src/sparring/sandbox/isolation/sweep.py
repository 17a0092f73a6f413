"""Ending every process of a sandbox but its exec server, from the host, through the kernel.

``reset`` and ``restore`` must leave nothing of the last user running, and that must not depend on
anything the sandbox's processes can reach. The exec server (PID 1) runs with the agent's uid, so a
kill that PID 1 performs (a walk of its /proc) is a kill the agent can weaken; the host's kill is the
one that counts, and the server's KILLALL after it only does the bookkeeping (reaping, reporting the
killed commands).

* **With cgroups** (root): every process of the sandbox is in its cgroup and cannot leave it (the
  sandbox has no cgroupfs). The group is frozen, so nothing forks or exits while it is counted; every
  member of ``cgroup.procs`` but bubblewrap and the server is SIGKILLed by its host pid; the group is
  thawed and read again until only those two are left.
* **Without** (unprivileged, or ``SPARRING_CGROUPS=off``): the host walks its own /proc for the
  processes of the sandbox's pid namespace (``/proc/PID/ns/pid``: no process of the sandbox can leave
  it, since ``setns``, ``unshare`` and ``CLONE_NEWPID`` are denied), stops each with SIGSTOP until no
  new one appears (so none forks away), then SIGKILLs them. Weaker: without a freezer a fork can race
  the walk, which the repeated rounds close only within the pids limit, and the walk costs a pass
  over every process of the host (``degraded`` says so).

Either way the result is checked by the caller with :func:`leftovers`, the same kernel view.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from sparring.sandbox.isolation.cgroups import CgroupSet

KILL_ROUNDS = 200
SETTLE_S = 5.0  # how long killed processes may take to leave (a loaded host, a big address space)
PASS_S = 0.05  # how long one kill pass waits for its processes to leave before another pass

DEGRADED = (
    "reset kill: no cgroup to freeze; the host stops and kills the sandbox's pid namespace by a /proc walk"
)


@dataclass(frozen=True)
class Members:
    """How the host finds a sandbox's processes: its cgroups, else its pid namespace. Bubblewrap and
    the exec server (host pids) are the ones that stay."""

    cg: CgroupSet
    pid_ns: tuple[int, int]  # (st_dev, st_ino) of the server's /proc/PID/ns/pid
    bwrap: int
    server: int

    @property
    def trusted(self) -> frozenset[int]:
        return frozenset((self.bwrap, self.server))

    @property
    def by_cgroup(self) -> bool:
        return bool(self.cg.dirs)

    def all(self) -> list[int]:
        """Host pids of every live process of the sandbox (zombies excluded)."""
        if self.by_cgroup:
            return self.cg.pids()
        return pidns_members(self.pid_ns)


def pid_ns_of(pid: int) -> tuple[int, int]:
    st = os.stat(f"/proc/{pid}/ns/pid")
    return st.st_dev, st.st_ino


def pidns_members(ns: tuple[int, int]) -> list[int]:
    """Host pids of the live processes in pid namespace ``ns`` (a zombie has no namespace to stat)."""
    out = []
    with os.scandir("/proc") as it:
        for e in it:
            if not e.name.isdigit():
                continue
            try:
                st = os.stat(f"/proc/{e.name}/ns/pid")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == ns:
                out.append(int(e.name))
    return sorted(out)


def leftovers(m: Members) -> list[int]:
    """Host pids of the sandbox's processes other than the trusted ones."""
    return [p for p in m.all() if p not in m.trusted]


def signal_all(pids: list[int], sig: int) -> None:
    """Send ``sig`` to each of ``pids`` (host pids); one already gone, or not ours to signal, is skipped."""
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


def sweep(m: Members, settle_s: float = SETTLE_S) -> list[int]:
    """Kill every process of the sandbox but the trusted ones; what is still there after ``settle_s``."""
    left = leftovers(m)
    if not left:  # nothing but PID 1 (and bubblewrap): only they could fork, and they do not by themselves
        return []
    deadline = time.monotonic() + settle_s
    while True:
        if m.by_cgroup:
            _freeze_kill(m)
        else:
            _stop_kill(m)
        pause, until = 0.0002, min(deadline, time.monotonic() + PASS_S)
        while left and time.monotonic() < until:  # killed ones leave as they finish exiting
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
            left = leftovers(m)
        if not left or time.monotonic() >= deadline:
            return left
        # still there after a pass: one raced it (or exits slowly); kill again, which costs nothing


def _freeze_kill(m: Members) -> None:
    frozen = m.cg.freeze()
    try:
        signal_all(leftovers(m), signal.SIGKILL)  # frozen: nothing forks between the read and the kill
    finally:
        if frozen:
            m.cg.thaw()


def _stop_kill(m: Members) -> None:
    stopped: set[int] = set()
    for _ in range(KILL_ROUNDS):
        new = [p for p in leftovers(m) if p not in stopped]
        if not new:
            break
        signal_all(new, signal.SIGSTOP)
        stopped.update(new)
    signal_all(sorted(stopped), signal.SIGKILL)
