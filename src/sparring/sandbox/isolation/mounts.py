"""Thin wrappers over mount(2)/umount2(2) and safe path walking beneath a root.

Mounting through libc avoids a fork per mount, which keeps sandbox create and
reset in the millisecond range.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

from sparring.errors import SandboxError

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
MNT_DETACH = 2
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE, MS_SHARED = (
    1,
    2,
    4,
    32,
    4096,
    16384,
    1 << 18,
    1 << 20,
)


def mount(source: str, target: Path, fstype: str, options: str = "", flags: int = 0) -> None:
    rc = _libc.mount(source.encode(), str(target).encode(), fstype.encode(), flags, options.encode() or None)
    if rc != 0:
        e = ctypes.get_errno()
        raise SandboxError(f"mount {fstype} on {target} failed: {os.strerror(e)} (options {options!r})")


def bind(source: Path, target: Path, readonly: bool = False) -> None:
    """Bind ``source`` on ``target`` (read-only takes a second, remounting call, as the kernel wants)."""
    mount(str(source), target, "", flags=MS_BIND)
    if readonly:
        mount("none", target, "", flags=MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def umount(target: Path, lazy: bool = True) -> bool:
    """Unmount ``target``; returns False if it was not mounted."""
    rc = _libc.umount2(str(target).encode(), MNT_DETACH if lazy else 0)
    if rc != 0:
        e = ctypes.get_errno()
        if e in (errno.EINVAL, errno.ENOENT):
            return False
        raise SandboxError(f"umount {target} failed: {os.strerror(e)}")
    return True


def mounts_below(prefix: Path) -> list[Path]:
    """Mount points at or below ``prefix`` (deepest first), from /proc/self/mountinfo."""
    out: list[Path] = []
    p = str(prefix)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp == p or mp.startswith(p.rstrip("/") + "/"):
                out.append(Path(mp))
    return sorted(out, key=lambda x: len(x.parts), reverse=True)


def split_beneath(rel: str) -> list[str]:
    """Components of a relative path; rejects '..' so no path can climb out of its root."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise SandboxError(f"path {rel!r} climbs out of the workspace ('..' is not allowed)")
    return parts


def open_beneath(
    root: Path, rel: str, flags: int, mode: int = 0o644, make_parents: bool = False, owner: int | None = None
) -> int:
    """open(2) ``rel`` under ``root`` without following any symlink on the way (race-free).

    A symlink the agent planted cannot redirect a host-side read or write
    outside the sandbox: every component is opened with O_NOFOLLOW. Parents
    it creates, and the file when created, belong to ``owner`` (uid = gid).
    """
    parts = split_beneath(rel)
    if not parts:
        raise SandboxError("empty path")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for comp in parts[:-1]:
            try:
                nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not make_parents:
                    raise
                os.mkdir(comp, 0o755, dir_fd=fd)
                nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                if owner is not None:
                    os.fchown(nfd, owner, owner)
            os.close(fd)
            fd = nfd
        out = os.open(parts[-1], flags | os.O_NOFOLLOW, mode, dir_fd=fd)
        if owner is not None and flags & os.O_CREAT:
            st = os.fstat(out)
            if st.st_uid != owner:
                os.fchown(out, owner, owner)
        return out
    finally:
        os.close(fd)


def open_dir_beneath(root: Path, rel: str) -> int:
    """An O_PATH descriptor of directory ``rel`` under ``root``, no symlink followed on the way: mounting on
    ``/proc/self/fd/N`` of it lands on that directory, never where a link in an image's tree would point
    (an image whose /testbed is ``-> /usr`` cannot make the host mount over its own /usr)."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for comp in split_beneath(rel):
            nfd = os.open(comp, flags, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def bind_beneath(source: Path, root: Path, rel: str) -> Path:
    """Bind ``source`` on directory ``rel`` under ``root`` (which must exist, reached without following a
    symlink); returns the mount point's path for the unmount."""
    try:
        fd = open_dir_beneath(root, rel)
    except OSError as e:
        raise SandboxError(
            f"cannot mount on /{rel.lstrip('/')}: {e.strerror} (a directory, not a link)"
        ) from None
    try:
        mount(str(source), Path(f"/proc/self/fd/{fd}"), "", flags=MS_BIND)
    finally:
        os.close(fd)
    return root / rel.lstrip("/")
