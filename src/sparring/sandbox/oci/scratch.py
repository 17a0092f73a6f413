"""The writable places of an OCI container besides /workspace, returned to their birth state at every reset.

podman gives a ``--read-only`` container tmpfs mounts at /tmp, /var/tmp, /run, /dev and /dev/shm, all
owned by root, so a command (capability-less uid 0) may create, replace or remove files there: a file
left in /tmp, or a /dev/null replaced by a regular file that every later command reads as its stdin,
would reach the next user of a pooled sandbox. The host lists these trees at create (:func:`listing`)
and, after every reset's kill (nothing runs inside then), removes whatever is new (:func:`restore`);
an entry of the birth listing that changed or is gone cannot be put back faithfully, so it is returned
as a difference and the sandbox retired.

Everything is read through the exec server's root (``/proc/PID/root``) with descriptors, never
following a link and never crossing into another mount (devpts, mqueue: the IPC namespace has its
own clearing, isolation/ipcns.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat

SCRATCH = ("tmp", "var/tmp", "run", "dev", "dev/shm")
Listing = dict[str, tuple[int, int, int, int, str]]  # relative path -> mode, uid, gid, rdev, content digest


def _open_top(pid: int, rel: str) -> int:
    return os.open(f"/proc/{pid}/root/{rel}", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def _digest(name: str, dir_fd: int) -> str:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        return hashlib.sha256(f.read(1 << 20)).hexdigest()


def _walk(pid: int, rel: str, birth: Listing | None) -> tuple[Listing, list[str]]:
    """The listing of tree ``rel``; with ``birth``, what is not in it is removed on the way and each
    difference from it is returned."""
    top = _open_top(pid, rel)
    diffs: list[str] = []
    out: Listing = {}
    try:
        st = os.fstat(top)
        dev = st.st_dev
        out[rel] = (st.st_mode, st.st_uid, st.st_gid, st.st_rdev, "")  # chmod 000 /tmp would outlive a reset
        if birth is not None and birth.get(rel) != out[rel]:
            diffs.append(f"/{rel} changed")
        for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in [*dirnames, *filenames]:
                path = os.path.normpath(f"{rel}/{dirpath}/{name}")
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if (
                    st.st_dev != dev
                ):  # another mount (dev/shm is a tree of its own, pts and mqueue are not ours)
                    if name in dirnames:
                        dirnames.remove(name)
                    continue
                if birth is not None and path not in birth:
                    if stat.S_ISDIR(st.st_mode):
                        dirnames.remove(name)
                        shutil.rmtree(name, dir_fd=dfd)
                    else:
                        os.unlink(name, dir_fd=dfd)
                    continue
                digest = _digest(name, dfd) if stat.S_ISREG(st.st_mode) else ""
                if stat.S_ISLNK(st.st_mode):
                    digest = os.readlink(name, dir_fd=dfd)
                out[path] = (st.st_mode, st.st_uid, st.st_gid, st.st_rdev, digest)
                if birth is not None and birth[path] != out[path]:
                    diffs.append(f"/{path} changed")
    finally:
        os.close(top)
    return out, diffs


def listing(pid: int) -> Listing:
    """Every entry of the scratch trees of the container whose process ``pid`` is (read from the host)."""
    out: Listing = {}
    for rel in SCRATCH:
        out.update(_walk(pid, rel, None)[0])
    return out


def restore(pid: int, birth: Listing) -> list[str]:
    """Remove every entry not in ``birth``; the entries of ``birth`` that changed or are gone."""
    seen: Listing = {}
    diffs: list[str] = []
    for rel in SCRATCH:
        now, d = _walk(pid, rel, birth)
        seen.update(now)
        diffs += d
    return diffs + [f"/{p} is gone" for p in sorted(birth.keys() - seen.keys())]
