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
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparring.errors import SandboxError

OPAQUE = "trusted.overlay.opaque"


def _hash_file(p: str, h: hashlib._Hash) -> None:
    with open(p, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)


def _walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry below ``root`` (relative path, lstat), sorted, never following a link."""
    out: list[tuple[str, os.stat_result]] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as it:
            for e in it:
                r = f"{rel}/{e.name}" if rel else e.name
                st = e.stat(follow_symlinks=False)
                out.append((r, st))
                if stat.S_ISDIR(st.st_mode):
                    stack.append(r)
    out.sort()
    return out


def _entry_line(root: Path, rel: str, st: os.stat_result, h: hashlib._Hash) -> None:
    """Feed one entry into ``h``: kind, executable bit, content (files), target (links)."""
    mode = st.st_mode
    p = str(root / rel)
    if stat.S_ISDIR(mode):
        opaque = b""
        with contextlib.suppress(OSError):
            opaque = os.getxattr(p, OPAQUE, follow_symlinks=False)
        h.update(b"d\0" + rel.encode() + b"\0" + opaque + b"\n")
    elif stat.S_ISLNK(mode):
        h.update(b"l\0" + rel.encode() + b"\0" + os.fsencode(os.readlink(p)) + b"\n")
    elif stat.S_ISREG(mode):
        h.update(b"f\0" + rel.encode() + (b"\0x\0" if mode & 0o111 else b"\0-\0"))
        fh = hashlib.sha256()
        _hash_file(p, fh)
        h.update(fh.digest() + b"\n")
    elif stat.S_ISCHR(mode) and st.st_rdev == 0:
        h.update(b"w\0" + rel.encode() + b"\n")  # an overlayfs whiteout: the path is deleted
    else:
        h.update(b"?\0" + rel.encode() + b"\n")  # sockets, fifos, devices: kept out of layers


def tree_digest(root: Path) -> str:
    """Digest of a directory tree's content (names, kinds, executable bits, bytes, link targets)."""
    h = hashlib.sha256()
    for rel, st in _walk(root):
        _entry_line(root, rel, st, h)
    return h.hexdigest()


def copy_tree(src: Path, dst: Path, owner: int | None = None) -> str:
    """Copy ``src`` into the new directory ``dst`` preserving overlayfs metadata; returns its digest.

    Every entry is owned by ``owner`` (uid = gid) when given, else keeps its source owner.
    """
    h = hashlib.sha256()
    os.mkdir(dst, 0o755)
    if owner is not None:
        os.chown(dst, owner, owner)
    for rel, st in _walk(src):
        _entry_line(src, rel, st, h)
        s, d = str(src / rel), str(dst / rel)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            os.mkdir(d, stat.S_IMODE(mode) | 0o700)
            with contextlib.suppress(OSError):
                os.setxattr(d, OPAQUE, os.getxattr(s, OPAQUE, follow_symlinks=False), follow_symlinks=False)
        elif stat.S_ISLNK(mode):
            os.symlink(os.readlink(s), d)
        elif stat.S_ISREG(mode):
            shutil.copyfile(s, d, follow_symlinks=False)
            os.chmod(d, stat.S_IMODE(mode))
        elif stat.S_ISCHR(mode) and st.st_rdev == 0:
            os.mknod(d, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
        else:
            continue
        if owner is not None:
            os.lchown(d, owner, owner)
        else:
            os.lchown(d, st.st_uid, st.st_gid)
    return h.hexdigest()


def stat_signature(root: Path) -> str:
    """A cheap fingerprint of a tree (names, kinds, sizes, mtimes, inodes): no file is read."""
    h = hashlib.sha256()
    for rel, st in _walk(root):
        h.update(f"{rel}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    return h.hexdigest()


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
            shutil.rmtree(tmp, ignore_errors=True)
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
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if digest is not None and found != digest.removeprefix("sha256:"):
            shutil.rmtree(tmp, ignore_errors=True)
            raise SandboxError(
                f"workspace {src} does not match its pinned digest (expected {digest}, found sha256:{found}): "
                "the task changed after it was admitted; re-admit it"
            )
        self._verified.add((str(src), found))
        return self._commit(tmp, f"ws-{found}")

    def freeze(self, upper: Path, below: tuple[Path, ...], base: Path) -> Snapshot:
        """Freeze an upper directory as a layer on top of ``below``; record the snapshot for this process."""
        tmp = self._tmp()
        try:
            digest = copy_tree(upper, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
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
                shutil.rmtree(d, ignore_errors=True)
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
                    shutil.rmtree(layer, ignore_errors=True)
                continue
            if name.startswith("L-") and name not in needed and now - _mtime(layer) > min_age_s:
                shutil.rmtree(layer, ignore_errors=True)
                n += 1
        return n
