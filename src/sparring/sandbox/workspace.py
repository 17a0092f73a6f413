"""Workspace trees: the diff between an initial state and a final state, and applying it.

The diff is taken by content, so it is the same whatever backend produced the
final state (overlay upper dir, a copy, a directory the user passes to
``judge score``). Byte-code caches are never part of a diff.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.mounts import open_beneath

IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")


def _files(root: Path) -> dict[str, Path]:
    """Regular files below ``root`` by relative path (symlinks and special files are skipped)."""
    out: dict[str, Path] = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
        for name in filenames:
            if name.endswith(IGNORED_SUFFIXES):
                continue
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(root).as_posix()] = p
    return out


def read_beneath(root: Path, rel: str) -> bytes | None:
    """A regular file's bytes, reached without following any symlink (None if it is not one any more).

    The walk that listed the files and this read are separate moments: a directory swapped for a
    symlink in between must not pull host files into the diff.
    """
    try:
        fd = open_beneath(root, rel, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read()


def tree_diff(initial: Path, final: Path) -> WorkspaceDiff:
    """Files whose content differs (or are new) in ``final``, and files of ``initial`` gone from it."""
    a, b = _files(initial), _files(final)
    changed: dict[str, bytes] = {}
    for rel in list(b):
        data = read_beneath(final, rel)
        if data is None:
            del b[rel]
            continue
        q = a.get(rel)
        if q is None or q.stat().st_size != len(data) or q.read_bytes() != data:
            changed[rel] = data
    deleted = tuple(sorted(rel for rel in a if rel not in b))
    return WorkspaceDiff(files=changed, deleted=deleted)
