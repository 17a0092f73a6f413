"""A local sandbox's writable tmpfs: made when a reset or restore needs it, or ahead, as a spare.

One tmpfs of ``disk_mb`` holds everything a sandbox writes (the workspace overlay's upper and work
directories, /tmp, $HOME, /dev/shm), so unmounting it discards every byte written and they share the
quota. Making one costs a mount and a dozen calls (mkdir, chmod, chown); :class:`Spare` makes the next
one when the event loop is free after a reset, at whichever of ``rw`` and ``rw2`` is not live, and the
next reset or restore swaps it in. A remount that comes before the spare is made makes its own, and
then the next spare at once, not when the loop is free: remounts are coming back to back (a judge's
restore, then the pool's reset) and the next would find none either.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from sparring.errors import SandboxError
from sparring.sandbox.isolation import mounts

WRITABLE = ("upper", "work", "tmp", "home", "shm")
AGENTS = ("upper", "tmp", "home", "shm")  # owned by the agent (work is the overlay's own)
STICKY = ("tmp", "shm")


def new_rw(rw: Path, disk_mb: int, uid: int | None) -> None:
    """A new tmpfs of ``disk_mb`` at ``rw`` holding the writable directories, owned by the agent (``uid``);
    unmounted again if making them fails."""
    rw.mkdir(exist_ok=True)
    mounts.mount("tmpfs", rw, "tmpfs", f"size={disk_mb}m,mode=0755", flags=mounts.MS_NOSUID | mounts.MS_NODEV)
    try:
        for d in WRITABLE:
            (rw / d).mkdir()
        for d in STICKY:
            os.chmod(rw / d, 0o1777)
        if uid is not None:
            for d in AGENTS:
                os.chown(rw / d, uid, uid)
    except OSError as e:
        with contextlib.suppress(SandboxError):
            mounts.umount(rw)
        raise SandboxError(f"preparing {rw.name} failed ({e})") from None


class Spare:
    """The next writable tmpfs of a sandbox whose directory is ``base``, made ahead (``rw`` and ``rw2``
    alternate as the live one)."""

    def __init__(self, base: Path, uid: int | None) -> None:
        self.base, self.uid = base, uid
        self.made: tuple[Path, int] | None = None  # its path and its size in MB
        self.due = False
        self.missed = False  # the last take found none: remounts come faster than the loop frees up

    def take(self, disk_mb: int) -> Path | None:
        """The spare, if one of ``disk_mb`` is made (one of another size, made before a spec was adopted,
        is unmounted); None: make one now."""
        made, self.made = self.made, None
        self.missed = made is None or made[1] != disk_mb
        if made is None:
            return None
        if made[1] != disk_mb:
            mounts.umount(made[0])
            return None
        return made[0]

    def soon(self, live: Callable[[], Path], disk_mb: Callable[[], int], usable: Callable[[], bool]) -> None:
        """Make the spare once the running loop is free, unless one is made or due; ``live`` and ``disk_mb``
        are read then, and nothing is made if ``usable()`` says the sandbox is gone by then."""
        if self.made is not None or self.due:
            return
        self.due = True

        def make() -> None:
            self.due = False
            if self.made is not None or not usable():
                return
            first = self.base / "rw"
            other = self.base / "rw2" if live() == first else first
            size = disk_mb()
            try:
                new_rw(other, size, self.uid)
            except SandboxError:
                return  # the next reset makes its own and reports what fails then
            self.made = (other, size)

        # Back to back (a restore, then a reset): the next remount may come before the loop is free.
        if self.missed:
            make()
        else:
            asyncio.get_running_loop().call_soon(make)
