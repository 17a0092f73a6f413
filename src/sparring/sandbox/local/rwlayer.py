"""A local sandbox's writable state: its tmpfs (made when a reset or restore needs it, or ahead, as a
spare) and the mounts made from it (:class:`WritableLayers`).

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
from typing import TYPE_CHECKING

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation import mounts
from sparring.sandbox.local.rootfs import HOME, RootPlan
from sparring.sandbox.storage import hosttree
from sparring.sandbox.storage.layers import copy_tree

if TYPE_CHECKING:
    from sparring.sandbox.local.backend import LocalBackend

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


class WritableLayers:
    """Mounting a local sandbox's writable state and taking it down again (a mixin of ``LocalSandbox``,
    which provides what is declared here): the rw tmpfs, /tmp and $HOME bound from it, the workspace
    overlay over the snapshot layers, /dev/shm; in copy mode, the host directories refilled instead."""

    id: str
    backend: LocalBackend
    spec: SandboxSpec
    plan: RootPlan
    rw: Path
    rootdir: Path
    merged: Path
    layers: tuple[Path, ...]
    alias: str | None
    _layer_mounts: list[Path]
    _shm_point: Path
    _spare: Spare

    if TYPE_CHECKING:

        @property
        def lower(self) -> Path: ...

    def _mount_layers(self, shm: bool = True, workspace: bool = True) -> None:
        """The sandbox's writable state, fresh: the workspace overlay, /tmp, home and /dev/shm, all on one
        tmpfs of disk_mb (so they share the quota, and unmounting it discards every byte written)."""
        if not self.backend.overlay:
            self._refill_copy()
            return
        spare = self._spare.take(self.spec.disk_mb)
        if spare is not None:
            self.rw = spare
        else:
            new_rw(self.rw, self.spec.disk_mb, self.backend.agent_uid)
        self._layer_mounts.append(self.rw)
        rw = self.rw
        for sub, dest in (("tmp", "tmp"), ("home", HOME.lstrip("/"))):
            mounts.bind(rw / sub, self.rootdir / dest)
            self._layer_mounts.append(self.rootdir / dest)
        for p in self.plan.late_binds:  # an environment living under /tmp (a clone there)
            target = self.rootdir / str(p).lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            mounts.bind(p, target, readonly=True)
            self._layer_mounts.append(target)
        if workspace:
            self._mount_workspace()
        if shm:
            self._mount_shm()

    def _mount_workspace(self) -> None:
        """The workspace overlay: rw/upper over the snapshot layers over the task's workspace; with a
        workspace alias, that one mount bound at the alias too (reset unmounts both, the alias first)."""
        rw = self.rw
        lowers = ":".join(str(p) for p in (*self.layers, self.lower))
        mounts.mount(
            "overlay", self.merged, "overlay", f"lowerdir={lowers},upperdir={rw}/upper,workdir={rw}/work",
            flags=mounts.MS_NOSUID | mounts.MS_NODEV,
        )  # fmt: skip
        self._layer_mounts.append(self.merged)
        if self.alias is not None:  # never through a link in the image's tree (checked at create too)
            self._layer_mounts.append(mounts.bind_beneath(self.merged, self.rootdir, self.alias))

    def _mount_shm(self) -> None:
        """Bind rw/shm on the point bubblewrap bound as /dev/shm: the mount propagates into the sandbox,
        and unmounting it (reset) propagates too, so /dev/shm goes with the rest of the rw tmpfs."""
        mounts.bind(self.rw / "shm", self._shm_point)
        self._layer_mounts.append(self._shm_point)

    def _refill_copy(self) -> None:
        """Copy mode: empty the workspace, /tmp, $HOME and /dev/shm directories in place (bubblewrap
        holds binds of them) and copy the top layer in. The walks are iterative and never follow a
        link the agent left."""
        try:
            self.merged.mkdir(exist_ok=True)
            for sub, mode in (("tmp", 0o1777), ("home", 0o755), ("shm", 0o1777)):
                (self.rw / sub).mkdir(parents=True, exist_ok=True)
                os.chmod(self.rw / sub, mode)
            for d in (self.merged, self.rw / "tmp", self.rw / "home", self.rw / "shm"):
                with os.scandir(d) as it:
                    for e in list(it):
                        hosttree.remove_tree(Path(e.path))
            src = self.layers[0] if self.layers else self.lower
            if src.is_dir():
                copy_tree(src, self.merged, into=True)
        except OSError as e:
            raise SandboxError(f"sandbox {self.id}: refilling the copied workspace failed ({e})") from None

    def _unmount_layers(self) -> None:
        for mp in reversed(self._layer_mounts):
            mounts.umount(mp)
        self._layer_mounts = []
