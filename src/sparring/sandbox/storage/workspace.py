"""Workspace trees: the diff between an initial state and a final state.

The diff is taken by content, so it is the same whatever backend produced the
final state (overlay upper dir, a copy, a directory the user passes to
``judge score``). Byte-code caches are never part of a diff.

The final tree is the agent's: it is walked with :mod:`hosttree` (iterative,
no link followed, bytes names) and what the diff carries is bounded by
``max_bytes``, counted in apparent sizes *before* anything is read, so a
sparse file far beyond the quota costs neither memory nor time. A tree the
host will not carry whole becomes a diff with ``flags`` (see
:class:`WorkspaceDiff`), never an exception the rollout cannot type.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

from sparring.errors import SandboxError, WorkspaceFault
from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.storage import hosttree

IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")
_IGNORED_DIRS_B = frozenset(d.encode() for d in IGNORED_DIRS)
_IGNORED_SUFFIXES_B = tuple(s.encode() for s in IGNORED_SUFFIXES)
# What a diff carries at most: it is held in memory, written into every trajectory as JSON and shipped
# to the judge. An honest change to a workspace is kilobytes; the caps leave room for data files.
MAX_DIFF_BYTES = 128 << 20  # all changed files together (never more than the sandbox's disk quota)
MAX_FILE_BYTES = 32 << 20  # one changed file


def diff_caps(disk_mb: int) -> tuple[int, int]:
    """(total, per file) bytes a diff of a sandbox with ``disk_mb`` of quota may carry."""
    total = min(disk_mb << 20, MAX_DIFF_BYTES)
    return total, min(total, MAX_FILE_BYTES)


def _regular_files(root: Path, on_file: Callable[[hosttree.Entry], None]) -> None:
    """Call ``on_file`` for every regular file below ``root`` (symlinks and special files are skipped)."""
    if not root.is_dir():
        return

    def entry(e: hosttree.Entry) -> bool:
        if stat.S_ISDIR(e.st.st_mode):
            return e.name not in _IGNORED_DIRS_B
        if stat.S_ISREG(e.st.st_mode) and not e.name.endswith(_IGNORED_SUFFIXES_B):
            on_file(e)
        return False

    hosttree.walk(root, entry)


def _too_large(what: str, cap: int) -> WorkspaceFault:
    return WorkspaceFault(
        f"{what} more than the {cap >> 20} MiB a diff carries (apparent sizes, sparse files included): "
        "the diff is not taken",
        "workspace_too_large",
    )


def tree_diff(
    initial: Path, final: Path, max_bytes: int = MAX_DIFF_BYTES, max_file_bytes: int = MAX_FILE_BYTES
) -> WorkspaceDiff:
    """Files whose content differs (or are new) in ``final``, and files of ``initial`` gone from it.

    The changed files carry at most ``max_file_bytes`` each and ``max_bytes`` together (apparent
    sizes, counted before reading); beyond that, or when the final tree cannot be walked, the diff is
    empty with a flag saying why. Names that are not UTF-8 cannot be keys of a diff: they are left
    out and flagged ``unrepresentable_path``.
    """
    sizes: dict[bytes, int] = {}
    try:
        _regular_files(initial, lambda e: sizes.__setitem__(e.rel, e.st.st_size))
    except WorkspaceFault as e:  # the initial tree is the host's own: not the agent's fault
        raise SandboxError(f"the initial workspace {initial} cannot be read: {e}") from None
    changed: dict[str, bytes] = {}
    seen: set[bytes] = set()
    odd: list[bytes] = []
    total = 0

    def on_file(e: hosttree.Entry) -> None:
        nonlocal total
        seen.add(e.rel)
        try:
            rel = e.rel.decode("utf-8")
        except UnicodeDecodeError:
            odd.append(e.rel)
            return
        size = e.st.st_size
        data: bytes | None = None
        if sizes.get(e.rel) == size:  # same size: compare (bounded by the initial file's size)
            data = hosttree.read_file(e, size)
            if (initial / rel).read_bytes() == data:
                return
        if size > max_file_bytes:
            raise _too_large(f"file {rel!r} has", max_file_bytes)
        total += size
        if total > max_bytes:
            raise _too_large("the changed files add up to", max_bytes)
        changed[rel] = data if data is not None else hosttree.read_file(e, size)

    try:
        _regular_files(final, on_file)
    except WorkspaceFault as e:
        return WorkspaceDiff(flags=(e.flag,), detail=str(e))
    deleted = tuple(sorted(r.decode("utf-8", "backslashreplace") for r in sizes if r not in seen))
    if odd:
        names = ", ".join(repr(r) for r in sorted(odd)[:5])
        return WorkspaceDiff(
            files=changed, deleted=deleted, flags=("unrepresentable_path",),
            detail=f"{len(odd)} file name(s) are not UTF-8 and cannot be carried by a diff: {names}",
        )  # fmt: skip
    return WorkspaceDiff(files=changed, deleted=deleted)
