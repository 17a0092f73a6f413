"""The sandbox's namespaces, seen from the host: its network namespace and its user namespace.

bubblewrap brings the loopback interface of a new network namespace up. With
``network="none"`` the namespace must be *empty*: the host (root, which holds
every capability over the sandbox's user namespace) enters it from a
short-lived thread and sets ``lo`` down. The thread dies afterwards, so no
other work of the process can ever run inside the sandbox's namespace.
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
from pathlib import Path

from sparring.errors import SandboxError

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP = 0x1


def _set_link(pid: int, ifname: str, up: bool) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
    finally:
        os.close(target)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", ifname.encode(), 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
        flags = flags | IFF_UP if up else flags & ~IFF_UP
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", ifname.encode(), flags))


def set_loopback(pid: int, up: bool) -> None:
    """Bring ``lo`` of process ``pid``'s network namespace up or down (a throwaway thread enters it)."""
    err: list[BaseException] = []

    def go() -> None:
        try:
            _set_link(pid, "lo", up)
        except BaseException as e:  # reported in the caller's thread
            err.append(e)

    t = threading.Thread(target=go, name="sparring-netns", daemon=True)
    t.start()
    t.join()
    if err:
        e = err[0]
        raise SandboxError(f"cannot configure the sandbox's network namespace: {e}") from None


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
