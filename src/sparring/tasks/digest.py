"""Content digests: one hash over every byte that affects a task's outcome.

``digest = sha256(canonical task.toml ‖ workspace/ ‖ hidden/ ‖ solution/ ‖ environment)``.
Files enter sorted by path with their executable bit, so the digest does not
depend on directory listing order, timestamps or ownership.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sparring.tasks import taskfs

DIGEST_PREFIX = "sha256:"


def canonical_json(obj: Any) -> bytes:
    """JSON with sorted keys and no whitespace: the same value gives the same bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def tree_entries(root: Path) -> list[tuple[str, str, str]]:
    """(relative path, kind, content hash) for every entry below ``root``, sorted.

    A link is hashed as a link (its target string), never through it: the walk follows no link
    (:mod:`sparring.tasks.taskfs`), so a task's digest is of its own bytes, not of whatever a link names."""
    out: list[tuple[str, str, str]] = []
    for e, data in taskfs.walk(root, lambda e: True):
        if e.kind == "link":
            out.append((e.rel, "link", e.target))
        elif e.kind == "file" and data is not None:
            out.append((e.rel, "exec" if e.executable else "file", hashlib.sha256(data).hexdigest()))
        elif e.kind == "dir" and e.empty:
            out.append((e.rel, "dir", ""))
        elif e.kind == "other":
            out.append((e.rel, "other", oct(e.mode)))
    out.sort()
    return out


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for entry in tree_entries(root):
        h.update(canonical_json(list(entry)))
        h.update(b"\n")
    return DIGEST_PREFIX + h.hexdigest()


def task_digest(spec_dump: dict[str, Any], task_dir: Path) -> str:
    """Digest of a task: its spec (canonical form, environment included) and its trees."""
    h = hashlib.sha256()
    h.update(b"sparring-task-v1\n")
    h.update(canonical_json(spec_dump))
    for part in ("workspace", "hidden", "solution"):
        h.update(f"\n[{part}]\n".encode())
        h.update(tree_digest(task_dir / part).encode())
    return DIGEST_PREFIX + h.hexdigest()
