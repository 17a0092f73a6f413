"""The task registry: a directory keeping every version of every task side by side.

Layout::

    LIBRARY/
      index.json              digest -> "<id>/v<version>" (rebuilt from the tree if lost)
      <id>/v<version>/        a task directory (task.toml, workspace/, hidden/,
                              solution/, admission.json when checked)

A version is immutable: adding different bytes under an existing id@version is
refused (bump ``version`` in task.toml); adding the same bytes again changes
nothing. A reference resolves as ``id`` (newest version), ``id@version``,
``sha256:<digest>`` or a unique prefix of a digest (with or without
``sha256:``; without it, at least 6 hex digits).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from sparring import atomicfile
from sparring.errors import TaskError
from sparring.filelock import locked
from sparring.tasks.loader import ADMISSION_FILE, TASK_FILE, Task, load_admission, load_task

INDEX = "index.json"
DEFAULT_LIBRARY = "task-library"
_HEX = re.compile(r"^(sha256:)?[0-9a-f]{6,64}$")
_PARTS = (TASK_FILE, "workspace", "hidden", "solution")


def default_library() -> Path:
    return Path(os.environ.get("SPARRING_TASK_LIBRARY") or DEFAULT_LIBRARY)


class Registry:
    """A task library on disk."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # ------------------------------------------------------------------ reading

    def _dirs(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p.parent for p in self.root.glob(f"*/v*/{TASK_FILE}"))

    def index(self) -> dict[str, str]:
        """digest -> "<id>/v<version>"; rebuilt from the tree when missing or unreadable."""
        try:
            data = json.loads((self.root / INDEX).read_text())
            if isinstance(data, dict) and isinstance(data.get("tasks"), dict):
                return dict(data["tasks"])
        except (OSError, ValueError):
            pass
        return {load_task(d).digest: d.relative_to(self.root).as_posix() for d in self._dirs()}

    def tasks(self) -> list[Task]:
        """Every version of every task, sorted by (id, version)."""
        out = [load_task(d) for d in self._dirs()]
        return sorted(out, key=lambda t: (t.id, t.spec.version))

    def versions(self, task_id: str) -> list[Task]:
        d = self.root / task_id
        vs = [load_task(p.parent) for p in d.glob(f"v*/{TASK_FILE}")] if d.is_dir() else []
        return sorted(vs, key=lambda t: t.spec.version)

    def resolve(self, ref: str) -> Task:
        """A task by id, id@version, digest or unique digest prefix; TaskError saying what did not resolve."""
        if not self.root.is_dir():
            raise TaskError(f"task library {self.root} does not exist (add tasks with `sparring tasks add`)")
        ref = ref.strip()
        if ref.startswith("sha256:") or (_HEX.match(ref) and not (self.root / ref).is_dir()):
            want = ref.removeprefix("sha256:")
            if not re.fullmatch(r"[0-9a-f]{1,64}", want):
                raise TaskError(f"{ref!r} is not a digest: expected sha256:<hex digits>")
            hits = sorted(
                {rel for dig, rel in self.index().items() if dig.removeprefix("sha256:").startswith(want)}
            )
            if not hits:
                raise TaskError(f"no task in {self.root} has a digest starting with {want}")
            if len(hits) > 1:
                raise TaskError(
                    f"digest prefix {want} is ambiguous in {self.root}: {len(hits)} tasks match; give more digits"
                )
            return load_task(self.root / hits[0])
        task_id, _, version = ref.partition("@")
        versions = self.versions(task_id)
        if not versions:
            raise TaskError(
                f"no task {task_id!r} in {self.root} (see `sparring tasks list --library {self.root}`)"
            )
        if not version:
            return versions[-1]
        try:
            v = int(version.removeprefix("v"))
        except ValueError:
            raise TaskError(f"bad version in {ref!r}: use id@<number>") from None
        for t in versions:
            if t.spec.version == v:
                return t
        have = ", ".join(str(t.spec.version) for t in versions)
        raise TaskError(f"{task_id} has no version {v} in {self.root} (versions: {have})")

    # ------------------------------------------------------------------ writing

    def plan(self, tasks: list[Task]) -> tuple[list[Task], list[Task]]:
        """(to add, already present) for these tasks; TaskError before anything is written on a conflict."""
        new: list[Task] = []
        same: list[Task] = []
        seen: dict[tuple[str, int], str] = {}
        for t in tasks:
            key = (t.id, t.spec.version)
            if key in seen and seen[key] != t.digest:
                raise TaskError(
                    f"two different tasks are {t.id}@{t.spec.version}: bump version in one task.toml"
                )
            seen[key] = t.digest
            dest = self.root / t.id / f"v{t.spec.version}"
            if (dest / TASK_FILE).is_file():
                existing = load_task(dest)
                if existing.digest != t.digest:
                    raise TaskError(
                        f"{t.id}@{t.spec.version} is already in {self.root} with other content "
                        f"({existing.digest[:19]}): versions are immutable, bump version in task.toml"
                    )
                same.append(existing)
            elif key not in {(x.id, x.spec.version) for x in new}:
                new.append(t)
        return new, same

    def add(self, tasks: list[Task]) -> tuple[list[Task], list[Task]]:
        """Copy tasks in as new versions; (added, unchanged). All-or-nothing against conflicts."""
        with locked(self.root / ".lock"):
            new, same = self.plan(tasks)
            index = self.index()
            added = []
            for t in new:
                dest = self.root / t.id / f"v{t.spec.version}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = atomicfile.temp_dir(dest)
                try:
                    for part in _PARTS:
                        src = t.path / part
                        # Links are copied as links, never read through (a task's links are its own bytes).
                        if src.is_dir() and not src.is_symlink():
                            shutil.copytree(src, tmp / part, symlinks=True)
                        elif src.is_file() or src.is_symlink():
                            shutil.copy2(src, tmp / part, follow_symlinks=False)
                    if load_admission(t) is not None:
                        shutil.copy2(t.path / ADMISSION_FILE, tmp / ADMISSION_FILE, follow_symlinks=False)
                    copied = load_task(tmp)
                    if copied.digest != t.digest:
                        raise TaskError(
                            f"{t.id}: the copy's digest differs from the source's (was it changing?)"
                        )
                    tmp.rename(dest)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
                index[t.digest] = dest.relative_to(self.root).as_posix()
                added.append(load_task(dest))
            self._write_index(index)
        return added, same

    def _write_index(self, index: dict[str, str]) -> None:
        data = {"format": 1, "tasks": dict(sorted(index.items()))}
        atomicfile.write_text(self.root / INDEX, json.dumps(data, indent=0))
