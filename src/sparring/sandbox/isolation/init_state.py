"""What a sandbox's PID 1 carries into the commands it starts, read from the host.

The exec server is PID 1 of its sandbox and runs with the agent's uid, so the kernel would let any
process of the sandbox change its limits, priority, scheduling, I/O priority or affinity (it compares
uids only). The seccomp filter denies every such call aimed at another process (seccomp.py), and the
server sets each command's state from scratch (execserver.c); this module is the host's check that both
held: :class:`InitState` is read once when the sandbox starts and again after every ``reset`` and
``restore``, and any difference retires the sandbox (local/sandbox.py, oci/reset.py).

Every item is read by the host, through its own /proc and syscalls that take a host pid (none needs
the server's cooperation, nor access to its memory):

========================  ==================================================
rlimits                   ``/proc/PID/limits``
nice, policy, priority    ``getpriority``, ``sched_getscheduler`` (with its
                          reset-on-fork bit), ``sched_getparam``
I/O priority              the ``ioprio_get`` syscall
CPU affinity              ``sched_getaffinity``
cgroup membership         ``/proc/PID/cgroup``
OOM score adjustment      ``/proc/PID/oom_score_adj``
autogroup nice            ``/proc/PID/autogroup`` (a process of the uid may
                          lower the priority of PID 1's whole session there;
                          "" on a kernel without autogroups)
core dump filter          ``/proc/PID/coredump_filter`` (inherited by every
                          child; "" where the kernel has none)
credentials               uids, gids, groups, capabilities, no-new-privs and
                          seccomp mode from ``/proc/PID/status``
identity                  the start time (a pid reused by another process
                          is not the server)
========================  ==================================================
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, fields

from sparring.errors import SandboxError
from sparring.sandbox.isolation.cgroups import close_fds, pread_all
from sparring.sandbox.isolation.seccomp import host_arch

IOPRIO_WHO_PROCESS = 1
STATUS_KEYS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
               "Seccomp")  # fmt: skip

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def ioprio_of(pid: int) -> int:
    """The I/O priority of host process ``pid`` (``ioprio_get(IOPRIO_WHO_PROCESS, pid)``)."""
    nr = host_arch().syscalls["ioprio_get"]
    v = int(_libc.syscall(ctypes.c_long(nr), ctypes.c_long(IOPRIO_WHO_PROCESS), ctypes.c_long(pid)))
    if v < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return v


PROC_FILES = ("stat", "status", "limits", "cgroup", "oom_score_adj", "autogroup", "coredump_filter")
OPTIONAL = frozenset({"autogroup", "coredump_filter"})  # "" on a kernel without them


class ProcFiles:
    """The /proc files of one host process that :class:`InitState` reads, opened once and read again
    through their descriptors (``pread``): a reading after every reset costs no open, close or path
    walk. A descriptor stays bound to the process it was opened for: once that process is gone every
    read fails (ESRCH), so a reused pid is never read as the server. :meth:`close` when done."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fds: dict[str, int] = {}
        try:
            for name in PROC_FILES:
                try:
                    self.fds[name] = os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    if name not in OPTIONAL:
                        raise
                    os.stat(f"/proc/{pid}")  # gone: the OSError below
        except OSError as e:
            self.close()
            raise SandboxError(f"the sandbox's exec server (pid {pid}) cannot be read: {e}") from None

    def text(self, name: str) -> str:
        """The file's content now ("" for an optional file this kernel lacks)."""
        fd = self.fds.get(name)
        if fd is None:
            if name in OPTIONAL:
                return ""
            raise OSError(f"/proc/{self.pid}/{name} is closed")
        return pread_all(fd).decode()

    def read(self) -> InitState:
        """The process's state now; SandboxError when it is gone or unreadable."""
        return InitState.from_files(self)

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        close_fds(fds.values())

    def __enter__(self) -> ProcFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class InitState:
    """One reading of PID 1's inheritable state (see the module docstring for where each comes from)."""

    start_time: str
    rlimits: str
    nice: int
    policy: int
    priority: int
    ioprio: int
    affinity: tuple[int, ...]
    cgroups: str
    oom_score_adj: str
    credentials: str
    autogroup: str = ""
    coredump_filter: str = ""

    @classmethod
    def read(cls, pid: int) -> InitState:
        """Read host process ``pid``; SandboxError when it is gone or unreadable."""
        with ProcFiles(pid) as files:
            return cls.from_files(files)

    @classmethod
    def from_files(cls, files: ProcFiles) -> InitState:
        """Read the process of ``files`` (its held /proc descriptors, and syscalls by its pid)."""
        pid = files.pid
        try:
            stat = files.text("stat")
            status = dict(ln.split(":", 1) for ln in files.text("status").splitlines() if ":" in ln)
            return cls(
                start_time=stat[stat.rfind(")") + 2 :].split()[19],
                rlimits=files.text("limits"),
                nice=os.getpriority(os.PRIO_PROCESS, pid),
                policy=os.sched_getscheduler(pid),
                priority=os.sched_getparam(pid).sched_priority,
                ioprio=ioprio_of(pid),
                affinity=tuple(sorted(os.sched_getaffinity(pid))),
                cgroups=files.text("cgroup"),
                oom_score_adj=files.text("oom_score_adj").strip(),
                credentials="; ".join(f"{k}:{' '.join(status.get(k, '').split())}" for k in STATUS_KEYS),
                autogroup=files.text("autogroup").strip(),
                coredump_filter=files.text("coredump_filter").strip(),
            )
        except (OSError, IndexError, ValueError) as e:
            raise SandboxError(f"the sandbox's exec server (pid {pid}) cannot be read: {e}") from None

    def changes(self, now: InitState) -> list[str]:
        """The items that differ in ``now``, each as ``name: was -> now`` (rlimits: the changed lines)."""
        out = []
        for f in fields(self):
            was, cur = getattr(self, f.name), getattr(now, f.name)
            if was == cur:
                continue
            if isinstance(was, str) and "\n" in was:
                gone = [ln for ln in was.splitlines() if ln not in cur.splitlines()]
                new = [ln for ln in cur.splitlines() if ln not in was.splitlines()]
                was, cur = (
                    " | ".join(" ".join(ln.split()) for ln in gone),
                    " | ".join(" ".join(ln.split()) for ln in new),
                )
            out.append(f"{f.name}: {was} -> {cur}")
        return out

    def drift(self, pid: int | ProcFiles, who: str) -> str:
        """Why host process ``pid`` (the sandbox's ``who``: "exec server", "init"; or its held
        :class:`ProcFiles`) is no longer in this state, its birth state: the changed items, or that it
        cannot be read; "" when it is unchanged."""
        try:
            changed = self.changes(pid.read() if isinstance(pid, ProcFiles) else InitState.read(pid))
        except SandboxError as e:
            return str(e)
        if changed:
            return f"its {who}'s state changed since it started (" + "; ".join(changed) + ")"
        return ""
