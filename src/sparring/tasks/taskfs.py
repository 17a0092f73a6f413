"""Reading a task directory on the host without ever following a link out of it.

Task directories come from generators, importers and downloaded datasets: their
bytes are untrusted, links included. A ``workspace/tests/helpers_data.py`` that
is a link to a host file used to be read through by the judge (as root) and its
bytes sent into the judge's sandbox. So every host-side read of a task goes
through this module:

* a walk (:func:`walk`, :func:`files`) opens each directory from its parent's
  descriptor with ``O_NOFOLLOW | O_DIRECTORY`` and lists entries with ``lstat``:
  a link is reported as a link (its target string), never entered or read;
* a read by name (:func:`read_file`) resolves the name one component at a time
  from the root's descriptor, each opened ``O_NOFOLLOW``, so a component that is
  (or is swapped for) a link fails instead of redirecting the read. Only with
  ``follow_links`` (workspace readers: a link inside ``workspace/`` is the
  initial state's own) does it follow a *relative* link, resolved here, inside
  the root: an absolute target, or a ``..`` above the root, reads as absent;
* the root itself (``task/workspace``, ``task/hidden``...) must be a real
  directory: a root that is a link is a :class:`~sparring.errors.TaskError`.

Admission rejects links in ``hidden/`` and ``solution/`` and links that leave
``workspace/`` (:func:`escaping_links`, rule ``task_links``); these readers hold
even for a task nobody admitted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparring.errors import TaskError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_DEPTH = 256
"""Directory levels a walk enters at most (deeper is a TaskError: no task is that deep)."""
MAX_HOPS = 40
"""Links one read follows at most (as the kernel's own limit)."""

Kind = Literal["file", "dir", "link", "other"]


@dataclass(frozen=True)
class Entry:
    """One entry below a root: posix path relative to it, kind, lstat mode and size, a link's target."""

    rel: str
    kind: Kind
    mode: int
    size: int
    target: str = ""
    executable: bool = False
    """A regular file the reading user may execute (as ``os.access(X_OK)`` says, links not followed)."""
    empty: bool = False
    """A directory with no entries."""


def _kind(mode: int) -> Kind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def open_root(root: Path) -> int | None:
    """A descriptor of the directory ``root`` (its last component not a link); None if it does not exist."""
    try:
        return os.open(root, _DIR)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            what = "a link" if os.path.islink(root) else "not a directory"
            raise TaskError(
                f"{root} is {what}: a task's workspace/, hidden/ and solution/ must be real directories in it"
            ) from None
        raise TaskError(f"cannot read {root}: {e.strerror or e}") from None


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _open_regular(name: str, dir_fd: int) -> int | None:
    """The regular file ``name`` in ``dir_fd``, opened without following a link; None if it is not one."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def walk(root: Path, content: Callable[[Entry], bool] | None = None) -> list[tuple[Entry, bytes | None]]:
    """Every entry below ``root``, sorted by path, with the bytes of the regular files ``content`` asks for.

    No link is followed: links are entries of kind ``link`` with their target. A root that does not exist
    has no entries; a root that is a link is a TaskError."""
    fd = open_root(root)
    if fd is None:
        return []
    out: list[tuple[Entry, bytes | None]] = []
    try:
        _walk_dir(fd, "", content, out, 0)
    finally:
        os.close(fd)
    out.sort(key=lambda e: e[0].rel)
    return out


def _walk_dir(
    fd: int,
    rel: str,
    content: Callable[[Entry], bool] | None,
    out: list[tuple[Entry, bytes | None]],
    depth: int,
) -> bool:
    """Add ``fd``'s entries (below ``rel``) to ``out``; returns whether the directory is empty."""
    if depth > MAX_DEPTH:
        raise TaskError(f"task directory deeper than {MAX_DEPTH} levels at {rel!r}: not read")
    with os.scandir(fd) as it:
        listing = sorted((e.name, e.stat(follow_symlinks=False)) for e in it)
    for name, st in listing:
        r = f"{rel}/{name}" if rel else name
        kind = _kind(st.st_mode)
        if kind == "link":
            out.append((Entry(r, kind, st.st_mode, st.st_size, os.readlink(name, dir_fd=fd)), None))
        elif kind == "dir":
            try:
                child = os.open(name, _DIR, dir_fd=fd)
            except OSError:  # swapped for a link (or removed) since the listing: not entered
                out.append((Entry(r, "other", st.st_mode, 0), None))
                continue
            try:
                empty = _walk_dir(child, r, content, out, depth + 1)
            finally:
                os.close(child)
            out.append((Entry(r, kind, st.st_mode, 0, empty=empty), None))
        elif kind == "file":
            exe = os.access(name, os.X_OK, dir_fd=fd, follow_symlinks=False)
            entry = Entry(r, kind, st.st_mode, st.st_size, executable=exe)
            data = None
            if content is not None and content(entry):
                ffd = _open_regular(name, fd)
                if ffd is None:  # no longer a regular file: listed as something else
                    out.append((Entry(r, "other", st.st_mode, 0), None))
                    continue
                try:
                    data = _read_fd(ffd)
                finally:
                    os.close(ffd)
            out.append((entry, data))
        else:
            out.append((Entry(r, kind, st.st_mode, st.st_size), None))
    return not listing


def files(root: Path, want: Callable[[str], bool] | None = None) -> dict[str, bytes]:
    """The regular files below ``root`` (``want(rel)`` picks; all by default), path -> bytes, links skipped."""
    picked = (lambda e: want(e.rel)) if want is not None else (lambda e: True)
    return {e.rel: data for e, data in walk(root, picked) if data is not None}


class _Stop(Exception):
    """The name leaves the root, or a link is met where none may be followed."""


def _parts(rel: str) -> list[str]:
    return [p for p in rel.split("/") if p not in ("", ".")]


def _resolve(root_fd: int, rel: str, follow_links: bool) -> int | None:
    """A descriptor of the regular file ``rel`` names below ``root_fd``, or None (absent, not a regular file,
    a link not to be followed, or a name that leaves the root). Links are resolved here, never by the kernel."""
    todo = _parts(rel)[::-1]
    stack = [os.dup(root_fd)]
    hops = 0
    try:
        while todo:
            comp = todo.pop()
            if comp == "..":
                if len(stack) == 1:
                    raise _Stop
                os.close(stack.pop())
                continue
            try:
                st = os.stat(comp, dir_fd=stack[-1], follow_symlinks=False)
            except OSError:
                return None
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if not follow_links or hops > MAX_HOPS:
                    raise _Stop
                target = os.readlink(comp, dir_fd=stack[-1])
                if target.startswith("/"):
                    raise _Stop
                todo.extend(_parts(target)[::-1])
                continue
            if todo:
                try:
                    stack.append(os.open(comp, _DIR, dir_fd=stack[-1]))
                except OSError:  # not a directory, or swapped for a link since the stat
                    return None
            else:
                return _open_regular(comp, stack[-1])
        return None
    except _Stop:
        return None
    finally:
        for fd in stack:
            os.close(fd)


def _open_file(root: Path, rel: str, follow_links: bool) -> int | None:
    """An fd of the regular file ``rel`` below ``root`` (the caller closes it); None if there is none."""
    if "\x00" in rel or rel.startswith("/"):
        return None
    rfd = open_root(root)
    if rfd is None:
        return None
    try:
        return _resolve(rfd, rel, follow_links)
    finally:
        os.close(rfd)


def read_file(root: Path, rel: str, follow_links: bool = False) -> bytes | None:
    """The bytes of the regular file ``rel`` below ``root``; None if there is none (see :func:`_resolve`)."""
    fd = _open_file(root, rel, follow_links)
    if fd is None:
        return None
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def is_file(root: Path, rel: str, follow_links: bool = False) -> bool:
    """Whether ``rel`` names a regular file below ``root`` (as :func:`read_file` would read it)."""
    fd = _open_file(root, rel, follow_links)
    if fd is not None:
        os.close(fd)
    return fd is not None


def is_dir(root: Path, rel: str) -> bool:
    """Whether ``rel`` is a real directory below ``root``, reached without any link."""
    rfd = open_root(root)
    if rfd is None:
        return False
    fds = [rfd]
    try:
        for comp in _parts(rel):
            if comp == "..":
                return False
            try:
                fds.append(os.open(comp, _DIR, dir_fd=fds[-1]))
            except OSError:
                return False
        return True
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def leaves_root(rel: str, target: str, links: dict[str, str]) -> bool:
    """Whether the link at ``rel`` (target ``target``) resolves outside its root: an absolute target, or a
    ``..`` that climbs above the root, following the root's other ``links`` (path -> target) on the way."""
    parts = _parts(rel)[:-1]
    todo = _parts(target)[::-1]
    if target.startswith("/"):
        return True
    hops = 0
    while todo:
        comp = todo.pop()
        if comp == "..":
            if not parts:
                return True
            parts.pop()
            continue
        here = "/".join([*parts, comp])
        if here in links:
            hops += 1
            if hops > MAX_HOPS or links[here].startswith("/"):
                return True
            todo.extend(_parts(links[here])[::-1])
            continue
        parts.append(comp)
    return False


def escaping_links(root: Path) -> list[str]:
    """Links below ``root`` that resolve outside it (sorted ``rel -> target`` lines)."""
    links = {e.rel: e.target for e, _ in walk(root) if e.kind == "link"}
    return sorted(f"{rel} -> {t}" for rel, t in links.items() if leaves_root(rel, t, links))
