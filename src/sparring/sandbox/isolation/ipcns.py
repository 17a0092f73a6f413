"""Empty a sandbox's IPC namespace: the state that outlives every process in it.

System V shared memory segments, semaphore sets and message queues, and POSIX
message queues, belong to the IPC namespace, not to a process: they survive
the processes that made them, and a sandbox's IPC namespace lives as long as
its exec server. Without this, ``reset`` would hand the next rollout the last
one's segments, and the memory charged to a leftover segment would count
against the next rollout's limit.

System V objects are removed by the calling thread itself: it joins the
sandbox's IPC namespace (``setns`` changes only the calling thread), removes
what /proc/sysvipc lists there (the objects of the reader's namespace), and
returns to its own namespace before anything else runs on it, through a
descriptor of that namespace opened first. (A short-lived helper thread did
this before: starting and joining it cost more than the removal, 0.8 ms of
every reset on a loaded host, waiting for the thread to be scheduled.) Nothing
else can run on the thread meanwhile: the calls are synchronous, no await
between them, and the return is checked; a thread that could not return
raises.

POSIX queues are the files of the namespace's mqueue filesystem, which the
sandbox mounts at /dev/mqueue: the host unlinks them through the server's
root. Needs root (CAP_SYS_ADMIN over the sandbox's namespaces).

A sandbox that lives for many resets holds its namespace (:class:`HeldNamespace`):
a /proc/sysvipc list shows the namespace its reader was in when it opened the
file, so the three lists opened once from inside, and the sandbox's
/dev/mqueue opened once, are read again on each reset without entering the
namespace, which happens only when there is something to remove (0.19 ms of a
reset to about 0.03 when the namespace is empty).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from sparring.errors import SandboxError
from sparring.sandbox.isolation.cgroups import close_fds, pread_all

CLONE_NEWIPC = 0x08000000
SELF = "/proc/thread-self/ns/ipc"
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


def _parse_ids(listing: str) -> list[int]:
    """The ids of a /proc/sysvipc list (its column 2, below the header)."""
    return [int(line.split()[1]) for line in listing.splitlines()[1:] if line.strip()]


def _ids(kind: str) -> list[int]:
    """Ids of the objects of ``kind`` in the calling thread's IPC namespace."""
    return _parse_ids(Path(f"/proc/sysvipc/{kind}").read_text())


def _enter(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWIPC) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"cannot enter {what} IPC namespace: {os.strerror(err)}; run as root")


def _remove_all() -> dict[str, int]:
    """Remove every System V object of the calling thread's IPC namespace; counts per kind."""
    removed: dict[str, int] = {}
    for kind in _KINDS:
        ids = _ids(kind)
        for ident in ids:
            if _remove(kind, ident) != 0 and ctypes.get_errno() not in _GONE:
                raise SandboxError(f"cannot remove {kind} {ident}: {os.strerror(ctypes.get_errno())}")
        left = _ids(kind) if ids else []  # the removals verified; none made, none to verify
        if left:
            raise SandboxError(f"{len(left)} System V {kind} object(s) survived removal")
        removed[kind] = len(ids)
    return removed


@contextlib.contextmanager
def _inside(pid: int) -> Iterator[None]:
    """The calling thread in the IPC namespace of host process ``pid`` for the ``with`` body, and in its
    own again afterwards (checked: a thread that could not return raises)."""
    target = f"/proc/{pid}/ns/ipc"
    own = os.readlink(SELF)
    home = os.open(SELF, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _enter(fd, "the sandbox's")
        finally:
            os.close(fd)
        try:
            if os.readlink(SELF) != os.readlink(target):
                raise SandboxError(
                    "entering the sandbox's IPC namespace had no effect; its IPC objects were kept"
                )
            yield
        finally:
            _enter(home, "the host thread's own")
            if os.readlink(SELF) != own:  # never: setns to a namespace we hold, as root
                raise SandboxError("the host thread could not return to its own IPC namespace")
    finally:
        os.close(home)


def clear_sysv(pid: int) -> dict[str, int]:
    """Remove every System V IPC object in the IPC namespace of host process ``pid``; counts per kind.
    The calling thread is in its own IPC namespace again when this returns or raises."""
    try:
        with _inside(pid):
            return _remove_all()
    except OSError as e:
        raise SandboxError(f"clearing the sandbox's IPC objects failed: {e}") from None


def _mqueue_dir(pid: int) -> int:
    """A descriptor of the /dev/mqueue of the sandbox whose server is host process ``pid``."""
    try:
        return os.open(f"/proc/{pid}/root{MQUEUE}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise SandboxError(f"cannot list the sandbox's POSIX message queues ({e.strerror})") from None


def _unlink_queues(d: int) -> int:
    """Unlink every POSIX message queue in the mqueue directory ``d`` (a descriptor); how many."""
    try:
        names = os.listdir(d)
    except OSError as e:
        raise SandboxError(f"cannot list the sandbox's POSIX message queues ({e.strerror})") from None
    for name in names:
        try:
            os.unlink(name, dir_fd=d)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise SandboxError(f"cannot remove POSIX message queue {name!r} ({e.strerror})") from None
    return len(names)


def clear_mqueues(pid: int) -> int:
    """Unlink every POSIX message queue of the sandbox whose server is host process ``pid``."""
    d = _mqueue_dir(pid)
    try:
        return _unlink_queues(d)
    finally:
        os.close(d)


class HeldNamespace:
    """A sandbox's IPC namespace watched through descriptors opened once, when it starts: the three
    /proc/sysvipc lists (a list shows the objects of the namespace its reader was in when it opened it,
    so these show the sandbox's from the host thread's own namespace) and the sandbox's /dev/mqueue.
    :meth:`clear` then costs three reads and a directory listing when the namespace is empty, the usual
    case; the namespace is entered only when there is something to remove. :meth:`close` when done."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.lists: dict[str, int] = {}
        self.mqueue = -1
        try:
            with _inside(pid):
                for kind in _KINDS:
                    self.lists[kind] = os.open(f"/proc/sysvipc/{kind}", os.O_RDONLY | os.O_CLOEXEC)
            self.mqueue = _mqueue_dir(pid)
        except OSError as e:
            self.close()
            raise SandboxError(f"cannot watch the sandbox's IPC namespace ({e})") from None
        except SandboxError:
            self.close()
            raise

    def ids(self, kind: str) -> list[int]:
        """Ids of the sandbox's System V objects of ``kind`` now."""
        return _parse_ids(pread_all(self.lists[kind]).decode())

    def clear(self) -> dict[str, int]:
        """Every IPC object of the namespace removed (as :func:`clear`, verified through the held lists);
        counts per kind."""
        try:
            found = {kind: len(self.ids(kind)) for kind in _KINDS}
            if any(found.values()):
                found = clear_sysv(self.pid)
                left = [kind for kind in _KINDS if self.ids(kind)]
                if left:
                    raise SandboxError(f"System V {', '.join(left)} object(s) survived removal")
        except OSError as e:
            raise SandboxError(f"clearing the sandbox's IPC objects failed: {e}") from None
        return {**found, "mqueue": _unlink_queues(self.mqueue)}

    def close(self) -> None:
        fds, self.lists = list(self.lists.values()), {}
        if self.mqueue >= 0:
            fds.append(self.mqueue)
            self.mqueue = -1
        close_fds(fds)


def clear(pid: int) -> dict[str, int]:
    """Every namespace-held IPC object of the sandbox removed; counts per kind (``mqueue`` included)."""
    return {**clear_sysv(pid), "mqueue": clear_mqueues(pid)}
