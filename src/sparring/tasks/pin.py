"""Pin a task's digests in its task.toml after its files were edited (``sparring tasks pin``).

task.toml pins ``workspace_digest``, the digest of workspace/ as the sandbox layer store imports it;
admission (rule ``initial_state_reproducible``) rebuilds the workspace and rejects the task when the
two differ, so an edit of workspace/ needs a new pin. The file is edited in place, one line, so the
author's comments and layout stay; nothing is written when the pin is already right.
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.tasks.loader import TASK_FILE, load_task, workspace_digest

_PIN_LINE = re.compile(r'^workspace_digest\s*=\s*"[^"\n]*"[ \t]*(#.*)?$', re.MULTILINE)
_TABLE = re.compile(r"^\s*\[", re.MULTILINE)


@dataclass(frozen=True)
class Pinned:
    """One task's pin: the digest now in task.toml, the one before (None: unpinned), whether it changed."""

    id: str
    path: Path
    workspace_digest: str
    previous: str | None

    @property
    def changed(self) -> bool:
        return self.previous != self.workspace_digest

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "path": str(self.path), "workspace_digest": self.workspace_digest,
                "previous": self.previous, "changed": self.changed}  # fmt: skip


def pinned_text(text: str, digest: str) -> str:
    """task.toml's text with ``workspace_digest`` set to ``digest`` (replaced in place, or added as the
    last top-level key, before the first table)."""
    line = f'workspace_digest = "{digest}"'
    if _PIN_LINE.search(text):
        return _PIN_LINE.sub(line, text, count=1)
    m = _TABLE.search(text)
    if m is None:
        return text.rstrip("\n") + ("\n" if text.strip() else "") + line + "\n"
    head = text[: m.start()]
    sep = "" if not head or head.endswith("\n") else "\n"
    return head + sep + line + "\n" + ("\n" if head.strip() else "") + text[m.start() :]


def pin_task(path: Path) -> Pinned:
    """Pin one task directory (it must load: a spec error is a TaskError naming it)."""
    task = load_task(path)  # validates task.toml and that workspace/ exists
    digest = workspace_digest(task.workspace)
    previous = task.spec.workspace_digest
    if previous != digest:
        f = task.path / TASK_FILE
        text = pinned_text(f.read_text(), digest)
        tomllib.loads(text)  # the edit must leave valid TOML (it always does; a check, not a hope)
        fd, tmp = tempfile.mkstemp(prefix=".task.", suffix=".toml", dir=task.path)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, f)
        task = load_task(task.path)
        assert task.spec.workspace_digest == digest
    return Pinned(task.id, task.path, digest, previous)
