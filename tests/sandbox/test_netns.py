"""The pool of ready network namespaces the local backend hands to its sandboxes (root only)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from sparring.sandbox.isolation.netns import NetnsPool
from tests_support import HANG_S

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces are made by root")


def _lo_up_in(fd: int) -> bool:
    """Whether ``lo`` is up in the namespace ``fd`` (read from a thread that enters it, then dies)."""
    from sparring.sandbox.isolation import netns

    out: list[bool] = []

    def go() -> None:
        if netns._libc().setns(fd, netns.CLONE_NEWNET) != 0:
            raise OSError("setns")
        import fcntl
        import socket
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("16sH14x", b"lo", 0)
            flags = struct.unpack("16sH14x", fcntl.ioctl(s, netns.SIOCGIFFLAGS, req))[1]
        out.append(bool(flags & netns.IFF_UP))

    t = threading.Thread(target=go)
    t.start()
    t.join()
    return out[0]


def test_namespaces_are_fresh_distinct_and_have_the_asked_loopback_state():
    pool = NetnsPool(size=2)
    try:
        mine = os.readlink("/proc/self/ns/net")
        fds = [pool.take(loopback=False) for _ in range(3)] + [pool.take(loopback=True) for _ in range(3)]
        ids = {os.readlink(f"/proc/self/fd/{fd}") for fd in fds}
        assert len(ids) == 6 and mine not in ids
        assert [_lo_up_in(fd) for fd in fds] == [False] * 3 + [True] * 3
        assert os.readlink("/proc/self/ns/net") == mine  # no thread of ours stayed in one
        for fd in fds:
            os.close(fd)
    finally:
        pool.close()


def test_pool_refills_in_the_background_and_close_releases_everything():
    pool = NetnsPool(size=3)
    os.close(pool.take(loopback=False))
    deadline = time.monotonic() + HANG_S
    while len(pool._ready[False]) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    held = list(pool._ready[False])
    assert len(held) == 3
    deadline = time.monotonic() + HANG_S
    while pool._refilling and time.monotonic() < deadline:  # the refill thread exits once full
        time.sleep(0.01)
    assert not pool._refilling
    assert not any(t.name == "sparring-netns" for t in threading.enumerate())
    pool.close()
    for fd in held:
        with pytest.raises(OSError):
            os.fstat(fd)
    with pytest.raises(Exception, match="closed"):
        pool.take(loopback=False)
