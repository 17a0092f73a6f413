"""Merging an image's unpacked layers, bottom to top, into one directory: the image's root.

The rules are the OCI image spec's: in each layer, whiteouts first (``.wh.NAME`` removes NAME from the
layers below, ``.wh..wh..opq`` empties its directory of what they put there), then its entries, each
replacing what lies below it, directories merging. Files are hard links to the unpacked layers (no
copy, and the layers stay shared between images); symlinks are made anew from their text.

Like unpack.py, the merge works beneath directory descriptors opened with ``O_NOFOLLOW``: a symlink
an earlier layer planted is replaced by a later layer's directory only when that layer names the
directory itself; a later layer that merely writes *below* a path an earlier one made a symlink or a
file (an implicit parent) is refused, since unpacking it as a tar would write through that link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path

from sparring.errors import ImageError
from sparring.images.unpack import _DIR, OPAQUE, WHITEOUT, remove_at


def _children(fd: int) -> list[str]:
    with os.scandir(fd) as it:
        return sorted(e.name for e in it)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _link(name: str, src_fd: int, dst_fd: int) -> None:
    try:
        os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except OSError as e:  # another file system, or hard links refused to this user: copy it
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_fd)
        try:
            st = os.fstat(src)
            dst = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, st.st_mode & 0o777, dir_fd=dst_fd
            )
            try:
                with open(src, "rb", closefd=False) as r, open(dst, "wb", closefd=False) as w:
                    shutil.copyfileobj(r, w)
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(dst)
        finally:
            os.close(src)


def _merge_dir(src_fd: int, dst_fd: int, rel: str, implicit: set[str], where: str) -> None:
    """Merge one layer directory into the image's directory (iterative over the tree)."""
    stack: list[tuple[int, int, str]] = [(os.dup(src_fd), os.dup(dst_fd), rel)]
    try:
        while stack:
            s_fd, d_fd, r = stack.pop()
            try:
                names = _children(s_fd)
                if OPAQUE in names:
                    for old in _children(d_fd):
                        remove_at(d_fd, old)
                for n in names:
                    if n.startswith(WHITEOUT) and n != OPAQUE:
                        remove_at(d_fd, n[len(WHITEOUT) :])
                for n in names:
                    if n.startswith(WHITEOUT):
                        continue
                    child = f"{r}/{n}" if r else n
                    st = os.stat(n, dir_fd=s_fd, follow_symlinks=False)
                    dst = _lstat(n, d_fd)
                    if stat.S_ISDIR(st.st_mode):
                        if dst is not None and not stat.S_ISDIR(dst.st_mode):
                            if child in implicit:
                                raise ImageError(
                                    f"{where}: writes below {child!r}, which an earlier layer made a "
                                    f"{'symlink' if stat.S_ISLNK(dst.st_mode) else 'file'}: refused "
                                    "(a write through a link)"
                                )
                            remove_at(d_fd, n)
                            dst = None
                        if dst is None:
                            os.mkdir(n, 0o700, dir_fd=d_fd)
                        nd = os.open(n, _DIR, dir_fd=d_fd)
                        os.fchmod(nd, stat.S_IMODE(st.st_mode))
                        stack.append((os.open(n, _DIR, dir_fd=s_fd), nd, child))
                        continue
                    if dst is not None:
                        remove_at(d_fd, n)
                    if stat.S_ISLNK(st.st_mode):
                        os.symlink(os.readlink(n, dir_fd=s_fd), n, dir_fd=d_fd)
                    elif stat.S_ISREG(st.st_mode):
                        _link(n, s_fd, d_fd)
            finally:
                os.close(s_fd)
                os.close(d_fd)
    finally:
        for s_fd, d_fd, _ in stack:
            with contextlib.suppress(OSError):
                os.close(s_fd)
                os.close(d_fd)


def flatten(layers: list[tuple[Path, set[str], str]], dest: Path) -> None:
    """Merge ``layers`` (unpacked dir, its implicit directories, a name for errors; bottom first) into
    the existing, empty directory ``dest``."""
    dfd = os.open(dest, _DIR)
    try:
        for path, implicit, where in layers:
            sfd = os.open(path, _DIR)
            try:
                _merge_dir(sfd, dfd, "", implicit, where)
            finally:
                os.close(sfd)
    finally:
        os.close(dfd)
