"""Task directories travel to nodes by content digest, once per node, never per episode.

The driver packs a task directory once (:func:`pack_task`) and puts the bytes
in Ray's object store; every episode request carries only the digest and the
object reference. A node unpacks a digest it has not seen into its own cache
(:class:`TaskCache`), loads it, and checks the digest it computes against the
one it was sent, so a node never plays bytes other than the driver's. The
environment layer a task pins is built on the node from the task's spec and
kept in the node's layer store under its own digest (the sandbox backend's
job), so layers are never sent at all.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import uuid
from pathlib import Path

from sparring.errors import TaskError
from sparring.tasks.loader import Task, load_task


def pack_task(task: Task) -> bytes:
    """The task directory as an uncompressed tar (task.toml, workspace/, hidden/, solution/)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(task.path), arcname="task", recursive=True)
    return buf.getvalue()


class TaskCache:
    """A node's tasks by digest, unpacked under ``root`` (one directory per digest)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._tasks: dict[str, Task] = {}
        self.unpacked = 0

    def get(self, digest: str) -> Task | None:
        t = self._tasks.get(digest)
        if t is None and (self.root / _name(digest) / "task").is_dir():
            t = self._load(digest, self.root / _name(digest) / "task")
        return t

    def put(self, digest: str, data: bytes) -> Task:
        """Unpack ``data`` as the task ``digest`` (atomically: a half-unpacked task is never seen)."""
        final = self.root / _name(digest)
        if not final.is_dir():
            tmp = self.root / f".{_name(digest)}.{uuid.uuid4().hex[:8]}"
            with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
                tar.extractall(tmp, filter="data")
            try:
                os.rename(tmp, final)
            except OSError:  # another worker of this node unpacked it first
                shutil.rmtree(tmp, ignore_errors=True)
            self.unpacked += 1
        return self._load(digest, final / "task")

    def _load(self, digest: str, path: Path) -> Task:
        task = load_task(path)
        if task.digest != digest:
            raise TaskError(
                f"task {task.id}: the node computed digest {task.digest}, the driver sent {digest}"
            )
        self._tasks[digest] = task
        return task


def _name(digest: str) -> str:
    return digest.replace(":", "-").replace("/", "-")
