"""Files replaced whole: written under a temporary name beside their destination, then renamed onto it.

A reader (another process, a later run, a crash's survivor) sees the old file or the new one, never a
part of either, and a write that fails leaves the destination as it was and no temporary file behind.
Every module that replaces a file it owns (task records, the task library's index, caches, exports, golden
sets, the checkpoints' pointer) goes through here, so they all keep the same three promises (the image
store keeps its own ``tmp/``, which its gc empties of a dead process's files):

- **whole or nothing**: the temporary file is renamed onto the destination only after the block that
  writes it has finished without an exception; otherwise it is removed;
- **the mode a user expects**: a file that is replaced keeps its permission bits (``sed -i`` does the
  same; a set-user-ID or set-group-ID bit is not carried over to new bytes); a new one gets the mode
  ``open()`` would give it (0666 less the umask), not ``mkstemp``'s 0600, which made ``tasks pin`` turn
  a 0644 ``task.toml`` into 0600; ``mode=`` sets an exact mode instead (a private cache's 0600, a
  program's 0755);
- **no clash**: each write takes its own temporary name (created exclusively), so two processes replacing
  one file at once each rename a whole file and the last rename wins.

A folder built whole (a task written, a task copied into the library) is built in :func:`temp_dir` and
renamed by its caller, with the mode ``mkdir`` would give it.

Nothing here calls ``fsync``: these are records a later run can make again, not a database (the
trajectory store is SQLite's own business).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, mode: int | None = None) -> Iterator[Path]:
    """A new empty temporary file beside ``path`` for the ``with`` block to write (by name: ``open``, a
    compiler's ``-o``, a library's ``write_table``); when the block ends cleanly it gets its mode and is
    renamed onto ``path``. On any exception, the block's or the rename's, it is removed and ``path`` is
    left as it was. ``mode`` None: the replaced file's mode, or 0666 less the umask for a new file."""
    dest = Path(path)
    tmp = _temp_name(dest)
    # O_EXCL: this name is ours alone. Made as open() makes a file (0666 less the umask), or private to
    # its owner while it is written when an exact mode (given to it at the end) is asked for
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666 if mode is None else 0o600)
    os.close(fd)
    try:
        yield tmp
        final = mode if mode is not None else _mode_of(dest)
        if final is not None:
            os.chmod(tmp, final)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` whole (:func:`replacing`)."""
    with replacing(path, mode=mode) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` (UTF-8) whole (:func:`replacing`)."""
    write_bytes(path, text.encode(), mode=mode)


def temp_dir(beside: str | os.PathLike[str]) -> Path:
    """A new empty folder beside ``beside`` (in its parent, named after it), to build a folder in and
    rename onto ``beside`` when it is whole. Made as ``mkdir`` makes one (0777 less the umask), not
    ``mkdtemp``'s 0700, which the rename would hand on: every generated task's folder was 0700."""
    tmp = _temp_name(Path(beside))
    os.mkdir(tmp, 0o777)  # exclusive as replacing's O_EXCL: a name taken already raises
    return tmp


def _temp_name(dest: Path) -> Path:
    """A hidden name beside ``dest``, after it, with 48 random bits: no other writer's."""
    return dest.with_name(f".{dest.name}.{secrets.token_hex(6)}.tmp")


def _mode_of(dest: Path) -> int | None:
    """The permission bits of the regular file ``dest`` replaces (None: no such file, keep the new one's)."""
    try:
        st = os.stat(dest, follow_symlinks=False)
    except OSError:
        return None
    # its permission bits only: new bytes under an old set-user-ID bit would run as the file's owner
    return stat.S_IMODE(st.st_mode) & 0o777 if stat.S_ISREG(st.st_mode) else None
