"""Pin a task's digests in its task.toml after its files were edited (``sparring tasks pin``).

task.toml pins ``workspace_digest``, the digest of workspace/ as the sandbox layer store imports it;
admission (rule ``initial_state_reproducible``) rebuilds the workspace and rejects the task when the
two differ, so an edit of workspace/ needs a new pin. An ``[environment] image`` named by a tag is
pinned too: to ``REF@sha256:...``, the digest the tag names in the image store (sparring.images), so
the task never refers to a moving tag. The file is edited in place, one line each, so the author's
comments and layout stay; nothing is written when the pins are already right.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring import atomicfile
from sparring.errors import TaskError
from sparring.tasks.loader import TASK_FILE, load_task, workspace_digest

_PIN_LINE = re.compile(r'^workspace_digest\s*=\s*"[^"\n]*"[ \t]*(#.*)?$', re.MULTILINE)
_TABLE = re.compile(r"^\s*\[", re.MULTILINE)
_ENV_TABLE = re.compile(r"^\s*\[environment\]\s*(#.*)?$", re.MULTILINE)
_IMAGE_LINE = re.compile(r'^(\s*image\s*=\s*)"[^"\n]*"', re.MULTILINE)


@dataclass(frozen=True)
class Pinned:
    """One task's pin: the digest now in task.toml, the one before (None: unpinned), whether it changed."""

    id: str
    path: Path
    workspace_digest: str
    previous: str | None
    image: str | None = None
    """The task's image as pinned now (``REF@sha256:...``); None: the task names no image."""
    image_previous: str | None = None

    @property
    def changed(self) -> bool:
        return self.previous != self.workspace_digest or self.image != self.image_previous

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "path": str(self.path), "workspace_digest": self.workspace_digest,
               "previous": self.previous, "changed": self.changed}  # fmt: skip
        if self.image is not None:
            out.update(image=self.image, image_previous=self.image_previous)
        return out


def pinned_image(ref: str) -> str:
    """``ref`` pinned by digest: as it is when it has one, else with the digest its tag names in the
    image store (a one-line TaskError when the store does not have it)."""
    from sparring.images.reference import parse
    from sparring.images.store import ImageStore

    if parse(ref).digest:
        return ref
    store = ImageStore()
    rec = store.resolve(ref)
    if rec is None:
        raise TaskError(
            f"[environment] image {ref!r} is a tag not in the image store {store.root}: "
            f"sparring image pull {ref} (or import / build it), then pin again"
        )
    return f"{ref}@{rec.digest}"


def image_pinned_text(text: str, image: str) -> str:
    """task.toml's text with the ``image`` line of its [environment] table set to ``image``."""
    env = _ENV_TABLE.search(text)
    if env is None:
        raise TaskError("task.toml names an image but has no [environment] table line to pin it in")
    end = _TABLE.search(text, env.end())
    stop = end.start() if end else len(text)
    body = text[env.end() : stop]
    if not _IMAGE_LINE.search(body):
        raise TaskError(
            'task.toml\'s image is not a plain `image = "..."` line in [environment]: pin it by hand'
        )
    body = _IMAGE_LINE.sub(lambda m: f'{m.group(1)}"{image}"', body, count=1)
    return text[: env.end()] + body + text[stop:]


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
    image_previous = task.spec.environment.image
    image = pinned_image(image_previous) if image_previous else None
    if previous != digest or image != image_previous:
        f = task.path / TASK_FILE
        text = pinned_text(f.read_text(), digest) if previous != digest else f.read_text()
        if image is not None and image != image_previous:
            text = image_pinned_text(text, image)
        tomllib.loads(text)  # the edit must leave valid TOML (it always does; a check, not a hope)
        atomicfile.write_text(f, text)
        task = load_task(task.path)
        assert task.spec.workspace_digest == digest and task.spec.environment.image == image
    return Pinned(task.id, task.path, digest, previous, image, image_previous)
