"""The sandbox's namespaces, seen from the host: its network namespace and its user namespace.

Network namespaces are made by the host ahead of time (:class:`NetnsPool`): a
dedicated thread unshares a fresh namespace, leaves ``lo`` down (``none``:
an empty namespace) or brings it up (``loopback``, and ``allowlist`` whose
proxy relay listens on loopback), and keeps an fd of it. The exec server's
launcher enters one before it starts bubblewrap, so creating a sandbox pays
neither for a new namespace nor for bubblewrap's loopback set-up undone
afterwards. Such a namespace belongs to the host's user namespace: code in
the sandbox holds no capability over it at all.

Without the C launcher, bubblewrap makes the namespace and brings ``lo`` up;
with ``network="none"`` the host then enters it from a short-lived thread and
sets ``lo`` down (:func:`set_loopback`). Either way the thread that entered a
sandbox's namespace does nothing else, so no other work of the process ever
runs inside it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sparring.errors import SandboxError

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP = 0x1
T = TypeVar("T")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _set_link(pid: int, ifname: str, up: bool) -> None:
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc().setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
    finally:
        os.close(target)
    _link_up_down(ifname, up)


def _link_up_down(ifname: str, up: bool) -> None:
    """Set ``ifname`` of the calling thread's network namespace up or down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", ifname.encode(), 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
        flags = flags | IFF_UP if up else flags & ~IFF_UP
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", ifname.encode(), flags))


def _in_throwaway_thread(fn: Callable[[], T], what: str) -> T:
    """Run ``fn`` in a new thread that dies afterwards (it may enter a namespace); errors come back here."""
    out: list[T] = []
    err: list[BaseException] = []

    def go() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # reported in the caller's thread
            err.append(e)

    t = threading.Thread(target=go, name="sparring-netns", daemon=True)
    t.start()
    t.join()
    if err:
        raise SandboxError(f"cannot {what}: {err[0]}") from None
    return out[0]


def set_loopback(pid: int, up: bool) -> None:
    """Bring ``lo`` of process ``pid``'s network namespace up or down (a throwaway thread enters it)."""
    _in_throwaway_thread(lambda: _set_link(pid, "lo", up), "configure the sandbox's network namespace")


def _new_netns(libc: ctypes.CDLL, loopback: bool) -> int:
    """In the calling (dedicated) thread: unshare a new network namespace, return an fd of it."""
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
    if loopback:
        _link_up_down("lo", True)
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


class NetnsPool:
    """Ready network namespaces (fds), ``lo`` down or up, refilled in the background.

    ``take`` hands one out (the caller owns the fd and closes it once the
    sandbox's launcher has entered it) or, when none is ready, makes one on
    the spot. A refill thread runs only while the pool is below ``size`` and
    then exits, so an idle backend holds no thread. Every namespace is made in
    a thread that does nothing else and dies afterwards.
    """

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._ready: dict[bool, list[int]] = {False: [], True: []}
        self._wanted: set[bool] = set()
        self._lock = threading.Lock()
        self._refilling = False
        self._closed = False

    def take(self, loopback: bool) -> int:
        with self._lock:
            if self._closed:
                raise SandboxError("the backend is closed")
            self._wanted.add(loopback)
            fd = self._ready[loopback].pop() if self._ready[loopback] else None
            start = not self._refilling
            self._refilling = True
        if start:
            threading.Thread(target=self._refill, name="sparring-netns", daemon=True).start()
        return fd if fd is not None else self._make_now(loopback)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            fds = self._ready[False] + self._ready[True]
            self._ready = {False: [], True: []}
        for fd in fds:
            os.close(fd)

    def _make_now(self, loopback: bool) -> int:
        return _in_throwaway_thread(
            lambda: _new_netns(_libc(), loopback), "create a network namespace for the sandbox"
        )

    def _refill(self) -> None:
        libc = _libc()
        while True:
            with self._lock:
                need = [k for k in sorted(self._wanted) if len(self._ready[k]) < self.size]
                if self._closed or not need:
                    self._refilling = False
                    return
            try:
                fd = _new_netns(libc, need[0])
            except OSError:
                with self._lock:
                    self._refilling = False
                return  # take() makes them on the spot and reports the error
            with self._lock:
                if self._closed:
                    os.close(fd)
                    self._refilling = False
                    return
                self._ready[need[0]].append(fd)


def make_user_namespace(inside: int, outside: int) -> int:
    """An fd of a new user namespace mapping uid/gid ``inside`` to the host's ``outside``, nothing else.

    Made by the host (root) once per backend and handed to every bubblewrap
    with ``--userns``: the agent's uid inside is then an unprivileged host
    user, never host root, so nothing the host's root owns (/proc/sys, /dev
    nodes) is the agent's.
    """
    import subprocess

    unshare = "/usr/bin/unshare"
    holder = subprocess.Popen(
        [unshare, "--user", "--", "/bin/sh", "-c", "read x"], stdin=subprocess.PIPE, close_fds=True
    )
    try:
        mine = os.readlink("/proc/self/ns/user")
        path = f"/proc/{holder.pid}/ns/user"
        for _ in range(5000):
            try:
                if os.readlink(path) != mine and Path(f"/proc/{holder.pid}/comm").read_text().strip() == "sh":
                    break
            except OSError:
                pass
            if holder.poll() is not None:
                raise SandboxError(f"cannot create a user namespace ({unshare} exited {holder.returncode})")
            time.sleep(0.001)
        mapping = f"{inside} {outside} 1\n"
        Path(f"/proc/{holder.pid}/uid_map").write_text(mapping)
        Path(f"/proc/{holder.pid}/gid_map").write_text(mapping)
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()
