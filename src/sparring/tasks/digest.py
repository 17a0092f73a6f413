"""Content digests: one hash over every byte that affects a task's outcome.

``digest = sha256(canonical task.toml ‖ workspace/ ‖ hidden/ ‖ solution/ ‖ environment)``.
Files enter sorted by path with their executable bit, so the digest does not
depend on directory listing order, timestamps or ownership.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

DIGEST_PREFIX = "sha256:"


def canonical_json(obj: Any) -> bytes:
    """JSON with sorted keys and no whitespace: the same value gives the same bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def tree_entries(root: Path) -> list[tuple[str, str, str]]:
    """(relative path, kind, content hash) for every entry below ``root``, sorted."""
    out: list[tuple[str, str, str]] = []
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(filenames) + [d for d in dirnames if (base / d).is_symlink()]:
            p = base / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out.append((rel, "link", os.readlink(p)))
            else:
                kind = "exec" if os.access(p, os.X_OK) else "file"
                out.append((rel, kind, hashlib.sha256(p.read_bytes()).hexdigest()))
        for d in dirnames:
            if not any(True for _ in (base / d).iterdir()) and not (base / d).is_symlink():
                out.append(((base / d).relative_to(root).as_posix(), "dir", ""))
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
