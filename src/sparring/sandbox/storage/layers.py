"""Content-addressed, read-only layers: imported workspaces and frozen snapshots.

A layer is a directory tree named by the digest of its content
(``<root>/layers/<digest>``), written once through a temporary directory and
an atomic rename, never changed after. Two kinds:

* **workspace layers** (``ws-…``): a task's initial workspace imported once.
  When the caller pins the digest, the bytes are verified at import and every
  later sandbox mounts the verified copy, so thousands of replays provably see
  identical bytes even if the task directory is touched later.
* **snapshot layers** (``L-…``): an overlayfs upper directory frozen as is,
  whiteouts (0/0 character devices) and opaque directories included, so it
  stacks under a new upper exactly as it was. The cost is proportional to
  what changed, not to the workspace.

A snapshot is a stack of layers (newest first) over a base workspace; its
record lives under ``snapshots/<owner pid>/`` so the reaper can drop the
records of dead owners and then every layer no record needs.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparring.errors import SandboxError, WorkspaceFault
from sparring.sandbox.storage import hosttree

log = logging.getLogger("sparring.sandbox")

OPAQUE = "trusted.overlay.opaque"


def _scan(
    src: Path,
    dst: Path | None = None,
    owner: int | None = None,
    max_bytes: int | None = None,
    into: bool = False,
) -> str:
    """Digest of ``src`` (see :func:`tree_digest`), copying it into the new directory ``dst`` on the way.

    The walk is :func:`hosttree.walk`'s (iterative, no link followed, bytes
    names); sparse files stay sparse. ``max_bytes`` bounds the apparent size
    of all regular files together: beyond it the tree is refused with a
    :class:`WorkspaceFault` before a byte more is read or written.
    """
    lines: list[tuple[bytes, bytes]] = []
    total = 0
    dst_fd = -1

    def own(name: bytes, st: os.stat_result) -> None:
        uid, gid = (owner, owner) if owner is not None else (st.st_uid, st.st_gid)
        os.chown(name, uid, gid, dir_fd=dst_fd, follow_symlinks=False)

    def on_enter(rel: bytes, name: bytes, fd: int) -> None:
        nonlocal dst_fd
        opaque = b""
        with contextlib.suppress(OSError):
            opaque = os.getxattr(fd, OPAQUE)
        if rel:
            lines.append((rel, b"d\0" + rel + b"\0" + opaque + b"\n"))
        if dst is None:
            return
        nfd = os.open(
            name if rel else dst, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dst_fd if rel else None
        )
        if dst_fd >= 0:
            os.close(dst_fd)
        dst_fd = nfd
        if opaque:
            with contextlib.suppress(OSError):
                os.setxattr(dst_fd, OPAQUE, opaque)

    def on_leave(rel: bytes, name: bytes, fd: int) -> None:
        nonlocal dst_fd
        if dst is None:
            return
        up = os.open(b"..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=dst_fd) if rel else -1
        os.close(dst_fd)
        dst_fd = up

    def on_entry(e: hosttree.Entry) -> bool:
        nonlocal total
        mode, rel = e.st.st_mode, e.rel
        copy = dst is not None
        if stat.S_ISDIR(mode):
            if copy:
                os.mkdir(e.name, stat.S_IMODE(mode) | 0o700, dir_fd=dst_fd)
                own(e.name, e.st)
            return True  # its line is written on entering it, with its opaque mark
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(e.name, dir_fd=e.dir_fd)
            except OSError as err:
                raise hosttree.unreadable(err, rel) from None
            lines.append((rel, b"l\0" + rel + b"\0" + target + b"\n"))
            if copy:
                os.symlink(target, e.name, dir_fd=dst_fd)
        elif stat.S_ISREG(mode):
            total += e.st.st_size
            if max_bytes is not None and total > max_bytes:
                raise WorkspaceFault(
                    f"the workspace's files add up to more than {max_bytes >> 20} MiB (apparent sizes, sparse "
                    "files included): beyond the sandbox's disk quota, the host does not copy it",
                    "workspace_too_large",
                )
            if copy:
                digest = hosttree.copy_file(e, dst_fd, stat.S_IMODE(mode))
            else:
                fh = hashlib.sha256()
                fd = hosttree.open_file(e)
                try:
                    hosttree.stream(fd, e.st.st_size, lambda off, data: None, fh)
                except OSError as err:
                    raise hosttree.unreadable(err, rel) from None
                finally:
                    os.close(fd)
                digest = fh.digest()
            lines.append((rel, b"f\0" + rel + (b"\0x\0" if mode & 0o111 else b"\0-\0") + digest + b"\n"))
        elif stat.S_ISCHR(mode) and e.st.st_rdev == 0:
            lines.append((rel, b"w\0" + rel + b"\n"))  # an overlayfs whiteout: the path is deleted
            if copy:
                os.mknod(e.name, 0o600 | stat.S_IFCHR, os.makedev(0, 0), dir_fd=dst_fd)
        else:
            lines.append((rel, b"?\0" + rel + b"\n"))  # sockets, fifos, devices: kept out of layers
            return False
        if copy:
            own(e.name, e.st)
        return False

    if dst is not None and not into:
        os.mkdir(dst, 0o755)
        if owner is not None:
            os.chown(dst, owner, owner)
    try:
        hosttree.walk(src, on_entry, on_enter, on_leave)
    finally:
        if dst_fd >= 0:
            os.close(dst_fd)
    h = hashlib.sha256()
    for _, line in sorted(lines):
        h.update(line)
    return h.hexdigest()


def tree_digest(root: Path, max_bytes: int | None = None) -> str:
    """Digest of a directory tree's content (names, kinds, executable bits, bytes, link targets)."""
    return _scan(root, max_bytes=max_bytes)


def copy_tree(
    src: Path, dst: Path, owner: int | None = None, max_bytes: int | None = None, into: bool = False
) -> str:
    """Copy ``src`` into the new directory ``dst`` (``into``: the existing, empty directory) preserving
    overlayfs metadata; returns its digest.

    Every entry is owned by ``owner`` (uid = gid) when given, else keeps its source owner.
    """
    return _scan(src, dst, owner, max_bytes, into)


def stat_signature(root: Path) -> str:
    """A cheap fingerprint of a tree (names, kinds, sizes, mtimes, inodes): no file is read."""
    h = hashlib.sha256()
    rows: list[tuple[bytes, os.stat_result]] = []

    def on_entry(e: hosttree.Entry) -> bool:
        rows.append((e.rel, e.st))
        return True

    hosttree.walk(root, on_entry)
    for rel, st in sorted(rows, key=lambda r: r[0]):
        h.update(rel + f"\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    return h.hexdigest()


def discard(path: Path) -> None:
    """Remove a tree the store no longer needs; a tree that resists is logged and left, never raised:
    one bad layer must not stop a backend from starting or another layer from going."""
    try:
        hosttree.remove_tree(path)
    except Exception as e:  # noqa: BLE001 - cleanup goes on whatever one tree does
        log.warning("could not remove %s (%s); remove it by hand", path, e)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


@dataclass(frozen=True)
class Snapshot:
    """A stack of layers (newest first) over the base workspace it was taken on."""

    id: str
    layers: tuple[Path, ...]
    base: str


class LayerStore:
    """Layers under ``<root>/layers`` and snapshot records under ``<root>/snapshots``."""

    def __init__(self, root: Path, owner: int | None = None) -> None:
        self.root = root
        self.owner = owner  # uid (= gid) that owns imported workspaces: the agent's host user
        self.layers = root / "layers"
        self.records = root / "snapshots"
        self.layers.mkdir(parents=True, exist_ok=True)
        self.records.mkdir(parents=True, exist_ok=True)
        self._verified: set[tuple[str, str]] = set()  # (source dir, digest) checked by this store
        self._unpinned: dict[tuple[str, str], str] = {}  # (source dir, stat signature) -> digest

    def _commit(self, tmp: Path, name: str) -> Path:
        final = self.layers / name
        try:
            os.rename(tmp, final)
        except OSError:  # the same content is already there: keep the first copy
            discard(tmp)
            if not final.is_dir():
                raise
        return final

    def _tmp(self) -> Path:
        return self.layers / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"

    def import_workspace(self, src: Path, digest: str | None) -> Path:
        """The verified read-only copy of a workspace whose digest is ``digest``.

        The first use of a source directory by this store hashes it (a mismatch
        raises); later uses mount the verified copy without reading the source
        again, so edits to the task directory after that never reach a sandbox.
        """
        if digest is not None:
            hexd = digest.removeprefix("sha256:")
            final = self.layers / f"ws-{hexd}"
            if (str(src), hexd) in self._verified and final.is_dir():
                return final
            if final.is_dir():
                found = tree_digest(src)
                if found != hexd:
                    raise SandboxError(
                        f"workspace {src} does not match its pinned digest (expected {digest}, found "
                        f"sha256:{found}): the task changed after it was admitted; re-admit it"
                    )
                self._verified.add((str(src), hexd))
                return final
        else:
            sig = (str(src), stat_signature(src))
            known = self._unpinned.get(sig)
            if known is not None and (self.layers / f"ws-{known}").is_dir():
                return self.layers / f"ws-{known}"
            found = tree_digest(src)
            self._unpinned[sig] = found
            if (self.layers / f"ws-{found}").is_dir():
                return self.layers / f"ws-{found}"
        tmp = self._tmp()
        try:
            found = copy_tree(src, tmp, owner=self.owner)
        except BaseException:
            discard(tmp)
            raise
        if digest is not None and found != digest.removeprefix("sha256:"):
            discard(tmp)
            raise SandboxError(
                f"workspace {src} does not match its pinned digest (expected {digest}, found sha256:{found}): "
                "the task changed after it was admitted; re-admit it"
            )
        self._verified.add((str(src), found))
        return self._commit(tmp, f"ws-{found}")

    def freeze(
        self, upper: Path, below: tuple[Path, ...], base: Path, max_bytes: int | None = None
    ) -> Snapshot:
        """Freeze an upper directory as a layer on top of ``below``; record the snapshot for this process.

        ``max_bytes`` bounds the apparent size of what is copied (the sandbox's quota): a larger tree is
        refused with a :class:`WorkspaceFault` and nothing of it stays in the store.
        """
        tmp = self._tmp()
        try:
            digest = copy_tree(upper, tmp, max_bytes=max_bytes)
        except BaseException:
            discard(tmp)
            raise
        layer = self.layers / f"L-{digest}"
        stack = (layer, *below)
        sid = "snap-" + hashlib.sha256("\0".join([str(base), *map(str, stack)]).encode()).hexdigest()[:20]
        snap = Snapshot(sid, stack, str(base))
        self.save(snap)  # the record first, so a concurrent gc never drops the layer in between
        self._commit(tmp, layer.name)
        return snap

    def save(self, snap: Snapshot) -> None:
        d = self.records / str(os.getpid())
        d.mkdir(exist_ok=True)
        body = "\n".join([snap.base, *(p.name for p in snap.layers)]) + "\n"
        tmp = d / f".{snap.id}.tmp"
        tmp.write_text(body)
        os.rename(tmp, d / snap.id)

    def load(self, sid: str) -> Snapshot | None:
        """A snapshot recorded by any live owner of this store."""
        if not sid.startswith("snap-") or "/" in sid:
            return None
        for d in self.records.iterdir():
            p = d / sid
            if p.is_file():
                base, *names = p.read_text().splitlines()
                return Snapshot(sid, tuple(self.layers / n for n in names), base)
        return None

    def gc(self, is_orphaned: Callable[[int], bool], min_age_s: float = 30.0) -> int:
        """Drop records of dead owners, then every snapshot layer no record needs; returns layers removed.

        Layers younger than ``min_age_s`` stay: another process may be between
        writing a layer and recording the snapshot that needs it.
        """
        now = time.time()
        for d in self.records.iterdir():
            if d.name.isdigit() and is_orphaned(int(d.name)):
                discard(d)
        needed: set[str] = set()
        for d in self.records.iterdir():
            for rec in d.iterdir() if d.is_dir() else ():
                with contextlib.suppress(OSError):
                    needed.update(rec.read_text().splitlines()[1:])
        n = 0
        for layer in self.layers.iterdir():
            name = layer.name
            if name.startswith(".tmp-"):
                owner = name.split("-")[1]
                if owner.isdigit() and is_orphaned(int(owner)):
                    discard(layer)
                continue
            if name.startswith("L-") and name not in needed and now - _mtime(layer) > min_age_s:
                discard(layer)
                n += 1
        return n
