"""Which tasks a command means: paths, library references, or the whole library.

Every ``sparring tasks`` command takes tasks the same ways (a task directory, a
directory of tasks, a library reference ``id``, ``id@version`` or a digest
prefix, or nothing for the whole library); the CLI and the Python API share
these functions so the answers and the errors are the same everywhere.
"""

from __future__ import annotations

from pathlib import Path

from sparring.errors import TaskError
from sparring.tasks.loader import TASK_FILE, Task, find_tasks, load_task
from sparring.tasks.registry import Registry, default_library


def library_tasks(library: Path | None = None) -> list[Task]:
    """Every task of the library (default: :func:`default_library`); TaskError if there is none."""
    reg = Registry(library or default_library())
    if not reg.root.is_dir():
        raise TaskError(f"task library {reg.root} does not exist (add tasks with `sparring tasks add`)")
    return reg.tasks()


def tasks_or_library(paths: list[Path] | None, library: Path | None = None) -> list[Task]:
    """The tasks under ``paths``, or every task of the library when no path is given."""
    if paths:
        return [t for p in paths for t in find_tasks(p)]
    return library_tasks(library)


def resolve_refs(refs: list[str], library: Path | None = None) -> list[Path]:
    """Each REF as a path when it is one, else a task of the library (id, id@version, digest, prefix)."""
    out: list[Path] = []
    reg = None
    for ref in refs:
        p = Path(ref)
        if p.exists():
            out.append(p)
            continue
        if "/" in ref or ref.startswith("."):
            raise TaskError(
                f"path not found: {ref} (pass a task directory, a directory of tasks or a library ref)"
            )
        reg = reg or Registry(library or default_library())
        if not reg.root.is_dir():
            raise TaskError(
                f"{ref!r} is not a path, and there is no task library at {reg.root} to look it up in "
                "(pass --library DIR)"
            )
        out.append(reg.resolve(ref).path)
    return out


def load_each(paths: list[Path]) -> tuple[list[Task], list[tuple[Path, TaskError]]]:
    """Every task under ``paths`` (a task directory or a directory of tasks), and the task
    directories that do not load, each with its error (admission reports them as ``spec_valid``).
    A path that does not exist or holds no task is a TaskError."""
    tasks: list[Task] = []
    broken: list[tuple[Path, TaskError]] = []
    for p in paths:
        if not p.exists():
            raise TaskError(f"path not found: {p} (pass a task directory or a directory of tasks)")
        dirs = [p] if (p / TASK_FILE).is_file() else sorted(x.parent for x in p.rglob(TASK_FILE))
        if not dirs:
            raise TaskError(f"no tasks under {p}: no {TASK_FILE} found")
        for d in dirs:
            try:
                tasks.append(load_task(d))
            except TaskError as e:
                broken.append((d, e))
    return tasks, broken
