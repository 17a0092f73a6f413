"""Unpacking one image layer (a tar, maybe compressed) into a directory that a hostile image cannot escape.

A layer is whatever its author wrote, so nothing in it is trusted. Python's ``tarfile`` only parses;
every file is made here, beneath one directory descriptor:

* a name that is absolute or has a ``..`` component is refused (so is a whiteout that climbs out);
* every parent is opened from its own parent with ``O_NOFOLLOW | O_DIRECTORY``: a symlink planted by an
  earlier entry (or an earlier layer, see flatten.py) can never redirect a later write, which is refused;
* symlinks are made as links with their text as it is, and never followed on the host;
* a hard link may only name a regular file this layer already made;
* device nodes and fifos are never made (skipped and counted);
* setuid and setgid bits are dropped; ownership is never applied (everything belongs to the host user
  running Sparring); directories keep ``u+rwx`` so the store can always remove them;
* entries and bytes are bounded (:class:`Limits`), so a layer cannot fill the disk or the inode table.

Whiteouts (``.wh.NAME``, ``.wh..wh..opq``) are kept as empty marker files; flatten.py applies them.
The uncompressed stream is hashed as it is read, so the caller checks it against the config's diff_id.
A refusal is an :class:`~sparring.errors.ImageError` of one line naming the layer and the entry.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sparring.errors import ImageError

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
CHUNK = 1 << 20
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_BYTES_ENV = "SPARRING_IMAGE_MAX_BYTES"
MAX_FILES_ENV = "SPARRING_IMAGE_MAX_FILES"


@dataclass(frozen=True)
class Limits:
    """Most bytes (apparent file sizes) and entries one layer may unpack to."""

    max_bytes: int = 32 << 30
    max_files: int = 2_000_000

    @classmethod
    def from_env(cls) -> Limits:
        """Defaults, or ``$SPARRING_IMAGE_MAX_BYTES`` / ``$SPARRING_IMAGE_MAX_FILES`` when set."""
        out = cls()
        for env, name in ((MAX_BYTES_ENV, "max_bytes"), (MAX_FILES_ENV, "max_files")):
            raw = os.environ.get(env, "").strip()
            if raw:
                if not raw.isdigit() or int(raw) <= 0:
                    raise ImageError(f"${env}={raw!r} is not a positive whole number")
                out = cls(**{**out.__dict__, name: int(raw)})
        return out


@dataclass
class LayerStats:
    """What one unpack made: the uncompressed digest, counts, and the directories no entry named."""

    diff_id: str = ""
    files: int = 0
    bytes: int = 0
    skipped_devices: int = 0
    implicit_dirs: set[str] = field(default_factory=set)


class _Hashing:
    """A read-only stream that hashes what passes through it (the layer's diff_id)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.h = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.h.update(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


def _open_stream(blob: Path) -> tuple[IO[bytes], subprocess.Popen[bytes] | None]:
    """The uncompressed bytes of a layer blob, whatever it is compressed with (by its magic, not its
    declared media type): gzip, zstd (through the ``zstd`` program) or none."""
    f = open(blob, "rb")  # noqa: SIM115 - closed by the caller with the stream
    magic = f.read(4)
    f.seek(0)
    if magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb"), None  # type: ignore[return-value]
    if magic == b"\x28\xb5\x2f\xfd":
        f.close()
        zstd = shutil.which("zstd")
        if zstd is None:
            raise ImageError(f"layer {blob.name} is zstd-compressed: install zstd (apt-get install zstd)")
        proc = subprocess.Popen([zstd, "-dc", str(blob)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        return proc.stdout, proc
    return f, None


def _parts(name: str, where: str) -> list[str]:
    """The components of an entry's name; absolute names and ``..`` are refused."""
    if name.startswith("/"):
        raise ImageError(
            f"{where}: entry {name!r} has an absolute name: refused (a layer's names are relative)"
        )
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImageError(f"{where}: entry {name!r} climbs out with '..': refused")
    if any("\0" in p for p in parts):
        raise ImageError(f"{where}: entry {name!r} has a NUL byte in its name: refused")
    return parts


def remove_at(dir_fd: int, name: str) -> None:
    """Remove the entry ``name`` of an open directory (a whole tree if it is one), never following links."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    stack = [(os.open(name, _DIR, dir_fd=dir_fd), dir_fd, name)]
    while stack:
        fd, parent, nm = stack[-1]
        pushed = False
        with os.scandir(fd) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        os.chmod(e.name, 0o700, dir_fd=fd)
                    stack.append((os.open(e.name, _DIR, dir_fd=fd), fd, e.name))
                    pushed = True
                    break
                os.unlink(e.name, dir_fd=fd)
        if pushed:
            continue
        stack.pop()
        os.close(fd)
        os.rmdir(nm, dir_fd=parent)


class _Extractor:
    def __init__(self, root: Path, limits: Limits, where: str) -> None:
        self.root_fd = os.open(root, _DIR)
        self.limits = limits
        self.where = where
        self.stats = LayerStats()
        self.regular: set[str] = set()  # files this layer made that a hard link may name
        self.dir_modes: dict[str, int] = {}

    def close(self) -> None:
        os.close(self.root_fd)

    def _walk(self, parts: list[str], create: bool, name: str) -> int:
        """An fd of the directory ``parts`` (made when missing if ``create``), opened without following
        anything: a component that is a symlink or a file refuses the entry."""
        fd = os.dup(self.root_fd)
        try:
            for i, comp in enumerate(parts):
                try:
                    nfd = os.open(comp, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise ImageError(
                            f"{self.where}: entry {name!r} names a missing path: refused"
                        ) from None
                    os.mkdir(comp, 0o755, dir_fd=fd)
                    self.stats.implicit_dirs.add("/".join(parts[: i + 1]))
                    nfd = os.open(comp, _DIR, dir_fd=fd)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise ImageError(
                        f"{self.where}: entry {name!r} goes through {'/'.join(parts[: i + 1])!r}, which is a "
                        "symlink or a file, not a directory: refused (a write through a link)"
                    ) from None
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _count(self, size: int) -> None:
        s = self.stats
        s.files += 1
        s.bytes += size
        if s.files > self.limits.max_files:
            raise ImageError(
                f"{self.where}: more than {self.limits.max_files} entries: refused "
                f"(raise ${MAX_FILES_ENV} if the image is genuine)"
            )
        if s.bytes > self.limits.max_bytes:
            raise ImageError(
                f"{self.where}: more than {self.limits.max_bytes} bytes unpacked: refused "
                f"(raise ${MAX_BYTES_ENV} if the image is genuine)"
            )

    def add(self, tf: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        parts = _parts(m.name, self.where)
        if not parts:
            return  # the layer's root itself: the directory we unpack into
        last = parts[-1]
        if last.startswith(WHITEOUT) and last != OPAQUE and last[len(WHITEOUT) :] in ("", ".", ".."):
            raise ImageError(f"{self.where}: whiteout {m.name!r} names no entry below its directory: refused")
        if m.ischr() or m.isblk() or m.isfifo():
            self.stats.skipped_devices += 1
            return
        if not (m.isdir() or m.isreg() or m.issym() or m.islnk()):
            return  # other types (sockets cannot be in a tar; unknown ones are ignored)
        self._count(m.size if m.isreg() else 0)
        rel = "/".join(parts)
        pfd = self._walk(parts[:-1], True, m.name)
        try:
            try:
                st: os.stat_result | None = os.stat(last, dir_fd=pfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if m.isdir():
                if st is not None and not stat.S_ISDIR(st.st_mode):
                    remove_at(pfd, last)
                    st = None
                if st is None:
                    os.mkdir(last, 0o700, dir_fd=pfd)
                self.stats.implicit_dirs.discard(rel)
                self.dir_modes[rel] = (m.mode & 0o1777) | 0o700
                return
            if st is not None:
                remove_at(pfd, last)
                self.regular.discard(rel)
                self.dir_modes = {
                    k: v for k, v in self.dir_modes.items() if not (k == rel or k.startswith(rel + "/"))
                }
            if m.issym():
                if "\0" in m.linkname:
                    raise ImageError(
                        f"{self.where}: symlink {m.name!r} has a NUL byte in its target: refused"
                    )
                os.symlink(m.linkname, last, dir_fd=pfd)
            elif m.islnk():
                self._hardlink(m, pfd, last)
                self.regular.add(rel)
            else:
                self._write(tf, m, pfd, last)
                self.regular.add(rel)
        finally:
            os.close(pfd)

    def _hardlink(self, m: tarfile.TarInfo, pfd: int, last: str) -> None:
        tparts = _parts(m.linkname, self.where)
        trel = "/".join(tparts)
        if not tparts or trel not in self.regular:
            raise ImageError(
                f"{self.where}: hard link {m.name!r} -> {m.linkname!r} names no file made earlier in this "
                "layer: refused (a link out of the image)"
            )
        tfd = self._walk(tparts[:-1], False, m.name)
        try:
            tst = os.stat(tparts[-1], dir_fd=tfd, follow_symlinks=False)
            if not stat.S_ISREG(tst.st_mode):
                raise ImageError(
                    f"{self.where}: hard link {m.name!r} -> {m.linkname!r} is not to a file: refused"
                )
            os.link(tparts[-1], last, src_dir_fd=tfd, dst_dir_fd=pfd, follow_symlinks=False)
        finally:
            os.close(tfd)

    def _write(self, tf: tarfile.TarFile, m: tarfile.TarInfo, pfd: int, last: str) -> None:
        fd = os.open(
            last, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=pfd
        )
        try:
            src = tf.extractfile(m)
            left = m.size
            if src is not None:
                while left > 0:
                    data = src.read(min(CHUNK, left))
                    if not data:
                        raise ImageError(
                            f"{self.where}: entry {m.name!r} is cut short: the layer is truncated"
                        )
                    os.write(fd, data)
                    left -= len(data)
            os.fchmod(fd, (m.mode & 0o777) | 0o400)  # no setuid/setgid/sticky; the host user may read it
            with contextlib.suppress(OSError, OverflowError, ValueError):
                os.utime(fd, ns=(int(m.mtime) * 10**9, int(m.mtime) * 10**9))
        finally:
            os.close(fd)

    def finish(self) -> None:
        """Directory modes last (deepest first), as tar does: a read-only directory still got its files."""
        for rel in sorted(self.dir_modes, key=lambda r: r.count("/"), reverse=True):
            fd = self._walk(rel.split("/"), False, rel)
            try:
                os.fchmod(fd, self.dir_modes[rel])
            finally:
                os.close(fd)


def unpack_layer(blob: Path, dest: Path, limits: Limits, where: str) -> LayerStats:
    """Unpack the layer ``blob`` into the existing, empty directory ``dest``; ``where`` names the layer
    in errors. Returns the counts and the uncompressed stream's digest (the diff_id)."""
    raw, proc = _open_stream(blob)
    stream = _Hashing(raw)
    ex = _Extractor(dest, limits, where)
    try:
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tf:  # type: ignore[call-overload]
                for m in tf:
                    ex.add(tf, m)
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, OSError) as e:
            if isinstance(e, ImageError):
                raise
            raise ImageError(f"{where}: not a readable tar layer ({e}): pull or import it again") from None
        stream.drain()
        ex.finish()
    finally:
        ex.close()
        raw.close()
        if proc is not None:
            proc.kill()
            proc.wait()
    ex.stats.diff_id = "sha256:" + stream.h.hexdigest()
    return ex.stats
