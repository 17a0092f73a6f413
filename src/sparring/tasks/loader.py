"""Load and write task directories."""

from __future__ import annotations

import json
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w
from pydantic import ValidationError

from sparring import atomicfile
from sparring.errors import TaskError
from sparring.tasks import taskfs
from sparring.tasks.digest import task_digest
from sparring.tasks.spec import TaskSpec, canonical_dump

if TYPE_CHECKING:
    from sparring.sandbox.base import WorkspaceDiff

ADMISSION_FILE = "admission.json"
"""Admission's verdict on a task, beside task.toml (written by :mod:`sparring.admission`, read by the
registry and by ``tasks regress``)."""

TASK_FILE = "task.toml"
SOLUTION_CALLS = ".tool_calls.json"
"""solution/ file of a task whose reference is a sequence of tool calls (a JSON list of {name, arguments}):
what the oracle replays through the task's tools. Not a workspace file: solution_files() leaves it out."""


@dataclass(frozen=True)
class Task:
    """A loaded task: its spec, where it lives and its content digest."""

    spec: TaskSpec
    path: Path
    digest: str

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def workspace(self) -> Path:
        return self.path / "workspace"

    @property
    def hidden(self) -> Path:
        return self.path / "hidden"

    @property
    def solution(self) -> Path:
        return self.path / "solution"

    def solution_files(self) -> tuple[dict[str, bytes], list[str]]:
        """The reference solution as (files to write, paths to delete), paths relative to workspace."""
        files = taskfs.files(self.solution)  # regular files only: no link is followed out of the task
        listed = files.pop(".deleted", None)
        files.pop(SOLUTION_CALLS, None)
        deleted = (
            [ln.strip() for ln in listed.decode().splitlines() if ln.strip()] if listed is not None else []
        )
        return files, deleted

    def solution_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """The reference's tool calls, in order ([] for a task whose reference is files only)."""
        data = taskfs.read_file(self.solution, SOLUTION_CALLS)
        if data is None:
            return []
        raw = json.loads(data)
        return [(str(c["name"]), dict(c["arguments"])) for c in raw]


def solution_diff(task: Task) -> WorkspaceDiff:
    """The reference solution as the workspace change the judge scores."""
    from sparring.sandbox.base import WorkspaceDiff

    files, deleted = task.solution_files()
    return WorkspaceDiff(files=files, deleted=tuple(deleted))


def workspace_digest(workspace: Path) -> str:
    """The initial state's digest, as the sandbox layer store computes it when it imports a workspace."""
    from sparring.sandbox.storage.layers import tree_digest as layer_digest

    return "sha256:" + layer_digest(workspace)


def load_task(path: str | Path) -> Task:
    """Load a task directory; raises TaskError naming the problem and the fix."""
    d = Path(path)
    if not d.is_dir():
        raise TaskError(f"task directory not found: {d} (pass a directory containing {TASK_FILE})")
    f = d / TASK_FILE
    data = taskfs.read_file(d, TASK_FILE)  # never through a link: its target's bytes are not the task's
    if data is None:
        if f.is_symlink():
            raise TaskError(f"{d}: {TASK_FILE} is a link: a task's files must be regular files in it")
        raise TaskError(f"{d} has no {TASK_FILE}: not a task directory")
    try:
        raw = tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TaskError(f"malformed {f}: {e}") from None
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "(root)"
        raise TaskError(f"invalid {f}: {loc}: {first['msg']} ({e.error_count()} problem(s))") from None
    if not taskfs.is_dir(d, "workspace"):
        if (d / "workspace").is_symlink():
            raise TaskError(
                f"{d}: workspace/ is a link: a task's initial state must be a real directory in it"
            )
        raise TaskError(f"{d} has no workspace/ directory: every task needs its initial state")
    return Task(spec=spec, path=d.resolve(), digest=task_digest(canonical_dump(spec), d))


def find_tasks(path: str | Path) -> list[Task]:
    """A task directory, or a directory of task directories (searched recursively), sorted by id."""
    d = Path(path)
    if not d.exists():
        raise TaskError(f"path not found: {d} (pass a task directory or a directory of tasks)")
    if (d / TASK_FILE).is_file():
        return [load_task(d)]
    tasks = [load_task(p.parent) for p in sorted(d.rglob(TASK_FILE))]
    if not tasks:
        raise TaskError(
            f"no tasks under {d}: no {TASK_FILE} found (generate some with `sparring tasks generate`)"
        )
    return sorted(tasks, key=lambda t: (t.id, t.spec.version))


def relative_name(rel: str) -> str:
    """``rel`` normalised (``.`` parts and repeated slashes dropped, as importers write ``./data.txt``)
    if it names a file below its directory; a TaskError otherwise.

    File names come from data (an agent's diff, an imported dataset, a golden file): ``../x`` or an
    absolute name joined onto the task directory would be written anywhere on the host. The one check
    of every write of a task's files (:func:`write_task`, the judge's golden set).
    """
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or not parts or ".." in parts or "\x00" in rel:
        raise TaskError(
            f"refusing to write task file {rel!r}: names must be relative, below the task, without '..'"
        )
    return "/".join(parts)


def write_task(
    out: Path,
    spec: TaskSpec,
    workspace: dict[str, str | bytes],
    hidden: dict[str, str | bytes],
    solution: dict[str, str | bytes],
    deleted: list[str] | None = None,
) -> Task:
    """Write a task directory atomically (built in a temp dir, then renamed into place)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = atomicfile.temp_dir(out)
    try:
        for sub, files in (("workspace", workspace), ("hidden", hidden), ("solution", solution)):
            (tmp / sub).mkdir()
            for rel, content in files.items():
                p = tmp / sub / relative_name(rel)
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(content.encode() if isinstance(content, str) else content)
        if deleted:
            (tmp / "solution" / ".deleted").write_text("".join(f"{x}\n" for x in deleted))
        spec = spec.model_copy(update={"workspace_digest": workspace_digest(tmp / "workspace")})
        (tmp / TASK_FILE).write_text(tomli_w.dumps(canonical_dump(spec, exclude_none=True)))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load_task(out)


Files = dict[str, str | bytes]
MakeTask = Callable[[int, int], tuple[TaskSpec, Files, Files, Files]]


def write_generated(make: MakeTask, n: int, seed: int, out: Path) -> list[Task]:
    """Tasks ``0 .. n-1`` of ``seed`` as ``make(index, seed)`` gives them (spec, workspace, hidden,
    solution), each written under ``out/<task id>/``: a family generator's ``generate``."""
    out = Path(out)
    return [
        write_task(out / spec.id, spec, ws, hidden, sol)
        for spec, ws, hidden, sol in (make(i, seed) for i in range(n))
    ]


def write_task_record(task: Task, name: str, record: dict[str, Any]) -> Path:
    """Write ``name`` (a JSON record about the task: admission, difficulty) next to task.toml, atomically.

    Records sit outside the digested bytes; each carries the digest it is about (see read_task_record).
    """
    dest = task.path / name
    atomicfile.write_text(dest, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return dest


def read_task_record(task: Task, name: str) -> dict[str, Any] | None:
    """The record ``name`` beside task.toml, if it is about these exact bytes (same digest); else None."""
    data = taskfs.read_file(task.path, name)  # a regular file beside task.toml, never through a link
    try:
        rec = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and rec.get("digest") == task.digest else None


def load_admission(task: Task) -> dict[str, Any] | None:
    """The stored admission result, if it is about these exact bytes (same digest)."""
    return read_task_record(task, ADMISSION_FILE)
