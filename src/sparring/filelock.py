"""An exclusive lock file, held across processes: the one lock the image store, the GGUF model cache and
the task registry take around what two processes must not make at once (and the tests around their
shared caches)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path, mode: int = 0o666) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``path`` (created with ``mode``, less the umask, and its
    folder made if missing) for the ``with`` block; another process taking it waits. The lock goes with
    the descriptor, so a process that dies holding it frees it; the file stays."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def beside(path: Path) -> Path:
    """The lock file of ``path``: the same name with ``.lock`` added, in the same folder."""
    return path.with_name(path.name + ".lock")
