"""Importers: turn external datasets into task directories (``sparring tasks import``).

One module per format:

``function-jsonl``   HumanEval/MBPP-style records (:mod:`.function_jsonl`)
``swe-bench``        SWE-bench instances over local repositories or their images (:mod:`.swe_bench`)
``terminal-bench``   Terminal-bench / Harbor task directories (:mod:`.terminal_bench`; alias ``harbor``)

Every importer validates all its input before it writes anything, and writes
each task atomically; a bad record is a one-line error naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparring.errors import ConfigError
from sparring.tasks.importers.function_jsonl import (
    FAMILY,
    FunctionRecord,
    RecordMeta,
    admission_hacks,
    assert_examples,
    dynamic_hidden_files,
    import_function_jsonl,
    imported_dynamic_files,
    mutation_spec,
    read_function_jsonl,
    validate_record,
    write_function_tasks,
)
from sparring.tasks.loader import Task

if TYPE_CHECKING:
    from sparring.sandbox.base import SandboxBackend


@dataclass(frozen=True)
class ImportOptions:
    """What a format may need beyond the input path: ``repos`` (swe-bench: where the repositories are),
    ``backend`` (terminal-bench: a sandbox backend to run the reference script in)."""

    limit: int | None = None
    repos: Path | None = None
    backend: SandboxBackend | None = None
    build: bool = False
    """terminal-bench: build each Dockerfile with buildah and pin the task to the image."""
    image_template: str | None = None
    """swe-bench: each instance's image, ``{instance_id}`` in it (instead of ``repos``)."""
    image_workspace: str = "/testbed"
    """swe-bench with ``image_template``: where each image keeps its repository."""


def _function_jsonl(path: Path, out: Path, opts: ImportOptions) -> list[Task]:
    return import_function_jsonl(path, out, limit=opts.limit)


def _swe_bench(path: Path, out: Path, opts: ImportOptions) -> list[Task]:
    from sparring.tasks.importers.swe_bench import import_swe_bench

    if opts.repos is None and opts.image_template is None:
        raise ConfigError(
            "--format swe-bench needs --repos (a git repository, or a directory of them) or --image-template"
        )
    return import_swe_bench(path, out, repos=opts.repos, limit=opts.limit, image_template=opts.image_template,
                            image_workspace=opts.image_workspace)  # fmt: skip


def _terminal_bench(path: Path, out: Path, opts: ImportOptions) -> list[Task]:
    from sparring.tasks.importers.terminal_bench import import_terminal_bench

    if opts.backend is None:
        raise ConfigError("--format terminal-bench needs a sandbox backend to run the task's solution in")
    return import_terminal_bench(path, out, backend=opts.backend, limit=opts.limit, build=opts.build)


IMPORT_FORMATS: dict[str, Callable[[Path, Path, ImportOptions], list[Task]]] = {
    "function-jsonl": _function_jsonl,
    "swe-bench": _swe_bench,
    "terminal-bench": _terminal_bench,
    "harbor": _terminal_bench,
}
NEEDS_BACKEND = frozenset({"terminal-bench", "harbor"})
"""Formats whose import runs code in a sandbox (the CLI builds the backend only for these)."""


def import_tasks(
    fmt: str,
    path: Path,
    out: Path,
    *,
    limit: int | None = None,
    repos: Path | None = None,
    backend: SandboxBackend | None = None,
    build: bool = False,
    image_template: str | None = None,
    image_workspace: str = "/testbed",
) -> list[Task]:
    """Import with a named format; ConfigError naming the known formats otherwise."""
    try:
        importer = IMPORT_FORMATS[fmt]
    except KeyError:
        raise ConfigError(
            f"unknown import format {fmt!r} (known: {', '.join(sorted(IMPORT_FORMATS))})"
        ) from None
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"--limit must be a positive integer, got {limit!r}")
    return importer(
        Path(path),
        Path(out),
        ImportOptions(limit=limit, repos=repos, backend=backend, build=build, image_template=image_template,
                      image_workspace=image_workspace),
    )  # fmt: skip


__all__ = [
    "FAMILY",
    "IMPORT_FORMATS",
    "NEEDS_BACKEND",
    "FunctionRecord",
    "ImportOptions",
    "RecordMeta",
    "admission_hacks",
    "assert_examples",
    "dynamic_hidden_files",
    "import_function_jsonl",
    "import_tasks",
    "imported_dynamic_files",
    "mutation_spec",
    "read_function_jsonl",
    "validate_record",
    "write_function_tasks",
]
