"""Empty a sandbox's IPC namespace: the state that outlives every process in it.

System V shared memory segments, semaphore sets and message queues, and POSIX
message queues, belong to the IPC namespace, not to a process: they survive
the processes that made them, and a sandbox's IPC namespace lives as long as
its exec server. Without this, ``reset`` would hand the next rollout the last
one's segments, and the memory charged to a leftover segment would count
against the next rollout's limit.

System V objects are removed from a short-lived host thread that joins the
sandbox's IPC namespace (``setns`` changes only the calling thread, and the
thread ends with it); /proc/sysvipc lists the objects of the reader's
namespace. POSIX queues are the files of the namespace's mqueue filesystem,
which the sandbox mounts at /dev/mqueue: the host unlinks them through the
server's root. Needs root (CAP_SYS_ADMIN over the sandbox's namespaces).
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from pathlib import Path

from sparring.errors import SandboxError

CLONE_NEWIPC = 0x08000000
IPC_RMID = 0
MQUEUE = "/dev/mqueue"
_KINDS = ("shm", "sem", "msg")
_GONE = (errno.EINVAL, errno.EIDRM)  # removed already (by its owner, between listing and removal)

_libc = ctypes.CDLL(None, use_errno=True)


def _remove(kind: str, ident: int) -> int:
    if kind == "shm":
        return int(_libc.shmctl(ident, IPC_RMID, None))
    if kind == "sem":
        return int(_libc.semctl(ident, 0, IPC_RMID))
    return int(_libc.msgctl(ident, IPC_RMID, None))


def _ids(kind: str) -> list[int]:
    """Ids of the objects of ``kind`` in the calling thread's IPC namespace (column 2 of /proc/sysvipc)."""
    lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return [int(line.split()[1]) for line in lines if line.strip()]


def _clear_sysv_here(target: str) -> dict[str, int]:
    fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWIPC) != 0:
            err = ctypes.get_errno()
            raise SandboxError(f"cannot enter the sandbox's IPC namespace: {os.strerror(err)}; run as root")
    finally:
        os.close(fd)
    if os.readlink("/proc/thread-self/ns/ipc") != os.readlink(target):
        raise SandboxError("entering the sandbox's IPC namespace had no effect; its IPC objects were kept")
    removed: dict[str, int] = {}
    for kind in _KINDS:
        ids = _ids(kind)
        for ident in ids:
            if _remove(kind, ident) != 0 and ctypes.get_errno() not in _GONE:
                raise SandboxError(f"cannot remove {kind} {ident}: {os.strerror(ctypes.get_errno())}")
        left = _ids(kind)
        if left:
            raise SandboxError(f"{len(left)} System V {kind} object(s) survived removal")
        removed[kind] = len(ids)
    return removed


def clear_sysv(pid: int) -> dict[str, int]:
    """Remove every System V IPC object in the IPC namespace of host process ``pid``; counts per kind."""
    target = f"/proc/{pid}/ns/ipc"
    out: list[dict[str, int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(_clear_sysv_here(target))
        except BaseException as e:  # reported in the caller's thread
            errors.append(e)

    t = threading.Thread(target=run, name="sparring-ipc-clear")
    t.start()
    t.join()
    if errors:
        e = errors[0]
        raise e if isinstance(e, SandboxError) else SandboxError(f"clearing IPC objects failed: {e}")
    return out[0]


def clear_mqueues(pid: int) -> int:
    """Unlink every POSIX message queue of the sandbox whose server is host process ``pid``."""
    d = Path(f"/proc/{pid}/root{MQUEUE}")
    try:
        names = os.listdir(d)
    except OSError as e:
        raise SandboxError(f"cannot list the sandbox's POSIX message queues ({e.strerror})") from None
    for name in names:
        try:
            os.unlink(d / name)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise SandboxError(f"cannot remove POSIX message queue {name!r} ({e.strerror})") from None
    return len(names)


def clear(pid: int) -> dict[str, int]:
    """Every namespace-held IPC object of the sandbox removed; counts per kind (``mqueue`` included)."""
    return {**clear_sysv(pid), "mqueue": clear_mqueues(pid)}
