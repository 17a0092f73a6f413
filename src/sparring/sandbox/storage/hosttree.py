"""Host-side walks, copies and removals of trees the agent made: iterative, bounded, never following a link.

Whatever the agent writes reaches the host as a tree to diff, snapshot,
restore or delete. It may be deep (thousands of levels), wide, full of sparse
files whose apparent size dwarfs the quota, named with bytes that are not
UTF-8, and, while no freezer stops the sandbox, changing under the walk. So
every host-side operation on such a tree goes through :func:`walk`:

* **iterative**, with one directory descriptor open at a time: a child is
  opened from its parent with ``O_NOFOLLOW | O_DIRECTORY`` (no path is ever
  resolved, so no symlink anywhere can redirect it and no path gets too
  long), and the walk climbs back through ``..`` only after checking that it
  lands on the directory it came from (a tree moved under the walk is a
  :class:`~sparring.errors.WorkspaceFault`, never a read outside it);
* **bytes names** throughout (the kernel's own), so no name can fail to
  encode;
* **bounded**: at most ``max_entries`` entries, and callers count apparent
  file sizes against their own budget before reading a byte;
* **typed**: any failure to read the agent's tree is a ``WorkspaceFault``
  carrying a flag, a fault of that sandbox alone.

File contents are streamed in chunks with holes skipped (``SEEK_DATA`` /
``SEEK_HOLE``), so a sparse file stays sparse in a copy and costs no memory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparring.errors import WorkspaceFault

MAX_ENTRIES = 250_000  # entries one walk visits at most; an honest workspace has far fewer
CHUNK = 1 << 20
_ZEROS = memoryview(bytes(CHUNK))
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def unreadable(e: OSError, where: bytes) -> WorkspaceFault:
    """The typed fault for an agent-made entry the host cannot read."""
    name = where.decode("utf-8", "backslashreplace") or "."
    return WorkspaceFault(
        f"workspace entry {name!r} cannot be read on the host ({e.strerror or e}): the sandbox's tree is unusable",
        "workspace_unreadable",
    )


@dataclass(frozen=True)
class Entry:
    """One entry below the root: its path (bytes, '/'-joined), name, lstat and its directory's fd.

    ``dir_fd`` is only valid during the callback that receives the entry.
    """

    rel: bytes
    name: bytes
    st: os.stat_result
    dir_fd: int


OnEntry = Callable[[Entry], bool]  # returns whether to descend (directories only)
OnDir = Callable[[bytes, bytes, int], None]  # (rel, name, fd of the directory itself)


def _noop(rel: bytes, name: bytes, fd: int) -> None:
    return None


def walk(
    root: Path,
    on_entry: OnEntry,
    on_enter: OnDir = _noop,
    on_leave: OnDir = _noop,
    max_entries: int = MAX_ENTRIES,
    one_fs: bool = False,
) -> None:
    """Visit every entry below ``root`` depth first, never following a link.

    ``on_entry`` sees each entry of a directory (after the whole directory is
    listed); for a directory, a true return value means the walk enters it:
    ``on_enter(rel, name, fd)`` then runs with the directory open, its entries
    follow, and ``on_leave(rel, name, parent_fd)`` runs once the walk is back
    in the parent. The root itself gets ``on_enter``/``on_leave`` with rel
    ``b""`` (its ``on_leave`` fd is the root's). ``one_fs`` keeps the walk on
    the root's file system (a mount point below is listed, not entered).
    """
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise unreadable(e, b"") from None
    # (rel, name, (dev, ino), subdirectories still to enter) for every directory on the current path
    frames: list[tuple[bytes, bytes, tuple[int, int], list[bytes]]] = []
    seen = 0
    try:
        while True:
            st = os.fstat(fd)
            rel, name = (frames[-1][0], frames[-1][3].pop()) if frames else (b"", b"")
            if frames:
                rel = rel + b"/" + name if rel else name
            on_enter(rel, name, fd)
            try:
                with os.scandir(fd) as it:
                    listing = [(os.fsencode(e.name), e.stat(follow_symlinks=False)) for e in it]
            except OSError as e:
                raise unreadable(e, rel) from None
            seen += len(listing)
            if seen > max_entries:
                raise WorkspaceFault(
                    f"the workspace has more than {max_entries} entries: the host does not walk it",
                    "workspace_too_large",
                )
            listing.sort()
            subdirs: list[bytes] = []
            for n, est in listing:
                r = rel + b"/" + n if rel else n
                if on_entry(Entry(r, n, est, fd)) and stat.S_ISDIR(est.st_mode):
                    if one_fs and est.st_dev != st.st_dev:
                        continue
                    subdirs.append(n)
            subdirs.reverse()  # popped from the end: entered in sorted order
            frames.append((rel, name, (st.st_dev, st.st_ino), subdirs))
            # Enter the next subdirectory, climbing out of every finished directory first.
            while frames and not frames[-1][3]:
                done_rel, done_name, _, _ = frames.pop()
                if not frames:
                    on_leave(done_rel, done_name, fd)
                    return
                try:
                    up = os.open(b"..", _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    raise unreadable(e, done_rel) from None
                os.close(fd)
                fd = up
                ust = os.fstat(fd)
                if (ust.st_dev, ust.st_ino) != frames[-1][2]:
                    raise WorkspaceFault(
                        "the workspace changed under the host's walk (a directory moved): retry on a stopped sandbox",
                        "workspace_changed",
                    )
                on_leave(done_rel, done_name, fd)
            nxt = frames[-1][3][-1]
            try:
                child = os.open(nxt, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                raise unreadable(e, frames[-1][0] + b"/" + nxt) from None
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def open_file(entry: Entry) -> int:
    """The regular file ``entry`` names, opened without following a link; a fault if it is not one now."""
    try:
        fd = os.open(entry.name, _FILE_FLAGS, dir_fd=entry.dir_fd)
    except OSError as e:
        raise unreadable(e, entry.rel) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_ino != entry.st.st_ino:
        os.close(fd)
        raise WorkspaceFault(
            f"workspace file {entry.rel!r} changed under the host's walk: retry on a stopped sandbox",
            "workspace_changed",
        )
    return fd


def _data_ranges(fd: int, size: int) -> list[tuple[int, int]]:
    """(start, end) of the parts of a file that hold data; the rest are holes (read as zeros)."""
    out: list[tuple[int, int]] = []
    off = 0
    while off < size:
        try:
            start = os.lseek(fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break
            if e.errno == errno.EINVAL:  # no hole support: the whole file is data
                return [(0, size)]
            raise
        if start >= size:
            break
        try:
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        except OSError:
            end = size
        out.append((start, end))
        off = end
    return out


def stream(fd: int, size: int, sink: Callable[[int, bytes], None], h: hashlib._Hash | None = None) -> None:
    """Feed the first ``size`` bytes of ``fd`` to ``sink(offset, data)`` (data parts only) and to ``h``
    (all of it, holes as zeros), one chunk at a time."""
    pos = 0
    for start, end in _data_ranges(fd, size):
        while h is not None and pos < start:
            n = min(CHUNK, start - pos)
            h.update(_ZEROS[:n])
            pos += n
        pos = start
        while pos < end:
            data = os.pread(fd, min(CHUNK, end - pos), pos)
            if not data:  # shrank under the walk: what is left reads as a hole
                break
            sink(pos, data)
            if h is not None:
                h.update(data)
            pos += len(data)
    while h is not None and pos < size:
        n = min(CHUNK, size - pos)
        h.update(_ZEROS[:n])
        pos += n


def read_file(entry: Entry, limit: int) -> bytes:
    """A regular file's first ``limit`` bytes (its apparent size, already counted by the caller)."""
    fd = open_file(entry)
    buf = bytearray(min(limit, entry.st.st_size))
    try:

        def put(off: int, data: bytes) -> None:
            buf[off : off + len(data)] = data

        stream(fd, len(buf), put)
    except OSError as e:
        raise unreadable(e, entry.rel) from None
    finally:
        os.close(fd)
    return bytes(buf)


def copy_file(entry: Entry, dst_dir: int, mode: int) -> bytes:
    """Copy a regular file into ``dst_dir`` under the same name, holes kept; returns its sha256."""
    h = hashlib.sha256()
    src = open_file(entry)
    try:
        dst = os.open(entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        try:
            size = entry.st.st_size

            def put(off: int, data: bytes) -> None:
                os.pwrite(dst, data, off)

            try:
                stream(src, size, put, h)
            except OSError as e:
                raise unreadable(e, entry.rel) from None
            os.ftruncate(dst, size)
            os.fchmod(dst, mode)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return h.digest()


def _chmod_dir(e: Entry, mode: int) -> None:
    """chmod a directory reached by its parent's fd without following a link (an O_PATH fd, changed
    through /proc: fchmodat cannot refuse links)."""
    try:
        fd = os.open(e.name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=e.dir_fd)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything below it, however deep, never leaving its file system.

    A missing path is fine. What cannot be removed raises OSError (or a
    WorkspaceFault when the tree cannot be walked); callers that clean up
    decide whether to go on.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return

    def entry(e: Entry) -> bool:
        if stat.S_ISDIR(e.st.st_mode):
            if e.st.st_mode & 0o700 != 0o700:
                _chmod_dir(e, 0o700)  # the agent's chmod 000 must not keep its tree on the host
            return True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(e.name, dir_fd=e.dir_fd)
        return False

    def leave(rel: bytes, name: bytes, parent: int) -> None:
        if rel:
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(name, dir_fd=parent)

    walk(path, entry, on_leave=leave, max_entries=1 << 62, one_fs=True)
    os.rmdir(path)
