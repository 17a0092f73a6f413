"""The judge imports only what it can see: non-source importables are taken out of the diff.

Python imports more than ``.py`` text: an extension module (``mod.so``,
``mod.cpython-311-x86_64-linux-gnu.so``, ``mod.abi3.so``, ``.pyd``) next to
``mod.py`` wins over it; bytecode (``__pycache__/*.pyc``, an unchecked-hash
pyc is loaded whatever the source says; a legacy ``mod.pyc`` imports with no
source at all); an archive on ``sys.path`` (``.zip``, ``.egg``, ``.whl``) is a
package; a ``.pth`` file or a ``sitecustomize`` / ``usercustomize`` module runs
at start-up. None of these can be read by the static checks, so none of them
may reach the judge's sandbox from the agent's diff.

The sandbox's diff collector never carries bytecode caches
(:mod:`sparring.sandbox.storage.workspace`), so an honest diff has none of these; a diff
that has them was made to. Files are recognised by name *and* by content
(ELF / Mach-O / PE headers, the bytecode magic, a zip's end record), so
renaming a shared object does not get it through. The task's initial workspace
is trusted (only the diff is examined), and a task may allow files by glob
(``judge.allow_binary_modules`` in task.toml).

Flags: ``binary_module`` (native code, bytecode, archives) and
``startup_hook`` (``.pth``, ``sitecustomize``, ``usercustomize``); both zero
the reward (:data:`sparring.judge.reward.ZEROING_FLAGS`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from sparring.sandbox.base import WorkspaceDiff

NATIVE_SUFFIXES = (".so", ".pyd", ".dylib", ".sl", ".dll")
BYTECODE_SUFFIXES = (".pyc", ".pyo")
ARCHIVE_SUFFIXES = (".zip", ".egg", ".whl", ".pyz")
STARTUP_STEMS = frozenset({"sitecustomize", "usercustomize"})
NATIVE_MAGIC = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
"""ELF, Mach-O (64, 32), fat Mach-O headers; PE (``MZ`` ... ``PE\\0\\0``) is checked apart."""
BYTECODE_MAGICS = range(3000, 4000)
"""CPython's bytecode magic numbers (3.0 to 3.13+ lie in this range; 3.11's is 3495)."""
ZIP_END = b"PK\x05\x06"
ZIP_TAIL = 22 + 65535  # the end-of-central-directory record and the longest comment it may carry


def _is_bytecode(data: bytes) -> bool:
    """A pyc header of any CPython: a 2-byte little-endian magic number, then ``\\r\\n``."""
    if data[:4] == importlib.util.MAGIC_NUMBER:
        return True
    return len(data) >= 16 and data[2:4] == b"\r\n" and int.from_bytes(data[:2], "little") in BYTECODE_MAGICS


def _is_native(data: bytes) -> bool:
    return data.startswith(NATIVE_MAGIC) or (data.startswith(b"MZ") and b"PE\0\0" in data[:1024])


def classify(rel: str, data: bytes) -> str | None:
    """The flag a diff file raises when it is importable without being text source; None for others."""
    p = PurePosixPath(rel)
    name = p.name.lower()
    if any(part.split(".")[0] in STARTUP_STEMS for part in p.parts) or name.endswith(".pth"):
        return "startup_hook"
    if "__pycache__" in p.parts or name.endswith(BYTECODE_SUFFIXES + NATIVE_SUFFIXES + ARCHIVE_SUFFIXES):
        return "binary_module"
    if ".so." in name or _is_native(data):
        return "binary_module"
    if name.endswith(".py"):
        return None  # text source: the static checks read it (and flag it when it does not parse)
    if _is_bytecode(data) or ZIP_END in data[-ZIP_TAIL:]:
        return "binary_module"
    return None


def allowed_by(rel: str, allowed: Sequence[str]) -> bool:
    """Whether the task's ``judge.allow_binary_modules`` globs allow ``rel`` (matched on the whole path)."""
    return any(fnmatchcase(rel, pat) for pat in allowed)


def split_importable(
    diff: WorkspaceDiff, allowed: Sequence[str] = ()
) -> tuple[WorkspaceDiff, list[str], list[str]]:
    """(the diff without non-source importables, the flags they raise, the paths removed).

    The judge applies the returned diff, so what was removed is never written into its sandbox; the
    flags zero the reward. Deletions are kept: removing a file cannot add code the checks do not see.
    """
    kept: dict[str, bytes] = {}
    flags: set[str] = set()
    removed: list[str] = []
    for rel, data in diff.files.items():
        flag = None if allowed_by(rel, allowed) else classify(rel, data)
        if flag is None:
            kept[rel] = data
        else:
            flags.add(flag)
            removed.append(rel)
    return WorkspaceDiff(files=kept, deleted=diff.deleted), sorted(flags), sorted(removed)


def importable_flags(diff: WorkspaceDiff, allowed: Sequence[str] = ()) -> list[str]:
    """The flags :func:`split_importable` raises on ``diff``."""
    return split_importable(diff, allowed)[1]
