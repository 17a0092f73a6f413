"""Importers: turn external datasets into task directories.

``function-jsonl`` is the HumanEval/MBPP-style format: one JSON object per
line with ``task_id``, ``prompt`` (signature + docstring), ``canonical_solution``
(the body), ``test`` (defines ``check(candidate)``) and ``entry_point``. Each
record becomes a task of family ``function-impl``:

    workspace/solution.py             prompt + ``raise NotImplementedError``
    workspace/tests/test_visible.py   smoke test: the module imports, the function exists
    workspace/pytest.ini              pythonpath = .
    hidden/test_hidden_<id>.py        the record's test, run as one test: check(<entry_point>)
    solution/solution.py              prompt + canonical_solution

The ``function-impl`` generator family writes its built-in records through
the same code (:func:`write_function_tasks`), so both share one path.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparring.errors import ConfigError, TaskError
from sparring.tasks.environment import pinned_requirements
from sparring.tasks.loader import Task, write_task
from sparring.tasks.spec import Environment, JudgeSpec, Provenance, TaskSpec

FAMILY = "function-impl"
IMPORTER = "import/function-jsonl"
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
SOLUTION_FILE = "solution.py"
STUB_BODY = "    raise NotImplementedError\n"
HIDDEN_TEST_NAME = "test_check"
_WORKSPACE_INI = "[pytest]\npythonpath = .\n"


@dataclass(frozen=True)
class FunctionRecord:
    """One validated function-jsonl record (``line`` is its 1-based line in the source file, 0 if built in)."""

    task_id: str
    prompt: str
    canonical_solution: str
    test: str
    entry_point: str
    line: int = 0

    @property
    def safe_id(self) -> str:
        """The task id as a lowercase identifier fragment: ``HumanEval/0`` -> ``humaneval_0``."""
        return re.sub(r"[^a-z0-9]+", "_", self.task_id.lower()).strip("_")

    @property
    def spec_id(self) -> str:
        """The task's id: ``HumanEval/0`` -> ``function-impl-humaneval-0``."""
        return f"{FAMILY}-{self.safe_id.replace('_', '-')}"

    @property
    def hidden_file(self) -> str:
        return f"test_hidden_{self.safe_id}.py"

    @property
    def hidden_test_id(self) -> str:
        return f"{self.hidden_file}::{HIDDEN_TEST_NAME}"

    def initial_source(self) -> str:
        return _with_newline(self.prompt) + STUB_BODY

    def solution_source(self) -> str:
        return _with_newline(_with_newline(self.prompt) + self.canonical_solution)


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


# --------------------------------------------------------------------------- validation


def _defines(source: str, name: str) -> bool:
    tree = ast.parse(source)
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def validate_record(raw: object, where: str, line: int = 0) -> FunctionRecord:
    """A record as a :class:`FunctionRecord`; TaskError (prefixed with ``where``) naming the bad field."""
    if not isinstance(raw, dict):
        raise TaskError(f"{where}: expected a JSON object with fields {', '.join(FIELDS)}")
    for name in FIELDS:
        if name not in raw:
            raise TaskError(f"{where}: missing field {name!r}")
        value = raw[name]
        if not isinstance(value, str) or not value.strip():
            raise TaskError(f"{where}: field {name!r} must be a non-empty string")
    rec = FunctionRecord(**{name: raw[name] for name in FIELDS}, line=line)
    if not rec.entry_point.isidentifier():
        raise TaskError(f"{where}: field 'entry_point' is not a Python identifier: {rec.entry_point!r}")
    if not rec.safe_id:
        raise TaskError(f"{where}: field 'task_id' has no letters or digits: {rec.task_id!r}")
    checks = (
        ("prompt", rec.initial_source(), rec.entry_point),
        ("canonical_solution", rec.solution_source(), rec.entry_point),
        ("test", rec.test, "check"),
    )
    for name, source, must_define in checks:
        try:
            ok = _defines(source, must_define)
        except (SyntaxError, ValueError) as e:
            detail = e.msg if isinstance(e, SyntaxError) else str(e)
            raise TaskError(f"{where}: field {name!r} is not valid Python ({detail})") from None
        if not ok:
            raise TaskError(f"{where}: field {name!r} does not define a top-level function {must_define}()")
    return rec


def read_function_jsonl(path: Path) -> list[FunctionRecord]:
    """Every record of a function-jsonl file, validated; TaskError naming the line and field of the first bad one."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"input file not found: {path} (pass a function-jsonl file)")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise TaskError(f"{path.name}: not UTF-8 text ({e.reason})") from None
    records: list[FunctionRecord] = []
    seen: dict[str, int] = {}
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path.name} line {n}"
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
        rec = validate_record(raw, where, n)
        if rec.spec_id in seen:
            raise TaskError(
                f"{where}: field 'task_id' {rec.task_id!r} gives task id {rec.spec_id} already used on line {seen[rec.spec_id]}"
            )
        seen[rec.spec_id] = n
        records.append(rec)
    if not records:
        raise TaskError(f"{path.name}: no records (expected one JSON object per line)")
    return records


# --------------------------------------------------------------------------- task writing


def hidden_test_source(rec: FunctionRecord) -> str:
    """The hidden test module: imports the function, embeds the record's test, runs check() as one test."""
    return (
        f"from solution import {rec.entry_point}\n\n\n"
        f"{_with_newline(rec.test.strip(chr(10)))}\n\n"
        f"def {HIDDEN_TEST_NAME}():\n"
        f"    check({rec.entry_point})\n"
    )


def visible_test_source(rec: FunctionRecord) -> str:
    return (
        "import solution\n\n\n"
        f"def test_{rec.entry_point}_is_defined():\n"
        f"    assert callable(getattr(solution, {rec.entry_point!r}, None))\n"
    )


def function_task(
    rec: FunctionRecord, provenance: Provenance, tags: Sequence[str] = (), difficulty: int = 1
) -> tuple[TaskSpec, dict[str, str | bytes], dict[str, str | bytes], dict[str, str | bytes]]:
    """(spec, workspace, hidden, solution) of the task a record becomes."""
    instruction = (
        f"Implement the function `{rec.entry_point}` in {SOLUTION_FILE} in the workspace so that it behaves "
        "exactly as its signature and docstring describe. Its body currently raises NotImplementedError; "
        "replace it with a working implementation (helper functions are fine) and keep the function's name "
        "and signature. Do not edit, add or delete any tests or test configuration. Run the visible tests "
        "with run_tests (or `python -m pytest tests` from the workspace root), then submit."
    )
    success = (
        f"The hidden test {rec.hidden_test_id} passes: it imports `{rec.entry_point}` from {SOLUTION_FILE} and "
        "checks it against the docstring's behaviour on many inputs, with the tests and test configuration unchanged."
    )
    judge = JudgeSpec.model_validate(
        {"kind": "pytest", "hidden_tests": [rec.hidden_test_id], "weights": {"all_pass": 1.0}}
    )
    spec = TaskSpec.model_validate(
        {
            "id": rec.spec_id,
            "family": FAMILY,
            "instruction": instruction,
            "success_criteria": success,
            "judge": judge,
            "difficulty": difficulty,
            "tags": [FAMILY, *tags],
            "provenance": provenance,
            "environment": Environment(requirements=pinned_requirements()),
        }
    )
    workspace: dict[str, str | bytes] = {
        SOLUTION_FILE: rec.initial_source(),
        "tests/test_visible.py": visible_test_source(rec),
        "pytest.ini": _WORKSPACE_INI,
    }
    hidden: dict[str, str | bytes] = {rec.hidden_file: hidden_test_source(rec)}
    solution: dict[str, str | bytes] = {SOLUTION_FILE: rec.solution_source()}
    return spec, workspace, hidden, solution


def write_function_tasks(
    items: Sequence[tuple[FunctionRecord, Provenance]],
    out: Path,
    tags: Sequence[str] = (),
    extra_hidden: Callable[[FunctionRecord], dict[str, str | bytes]] | None = None,
) -> list[Task]:
    """Write each record's task to out/<task id>/ (each atomically); if one fails, remove what this call wrote.

    ``extra_hidden(record)`` adds judge-only files to a task's hidden/ (the function-impl family's
    generated-test spec and admission hacks)."""
    out = Path(out)
    built = [function_task(rec, prov, tags) for rec, prov in items]  # spec errors surface before any write
    if extra_hidden is not None:
        for (rec, _), (_, _, hidden, _) in zip(items, built, strict=True):
            hidden.update(extra_hidden(rec))
    created_out = not out.exists()
    written: list[Path] = []
    tasks: list[Task] = []
    try:
        for spec, workspace, hidden, solution in built:
            dest = out / spec.id
            written.append(dest)
            tasks.append(write_task(dest, spec, workspace, hidden, solution))
    except BaseException:
        for d in written:
            shutil.rmtree(d, ignore_errors=True)
        if created_out:
            shutil.rmtree(out, ignore_errors=True)
        raise
    return tasks


def import_function_jsonl(path: Path, out: Path, *, limit: int | None = None) -> list[Task]:
    """Import a function-jsonl file into out/<task id>/; all records are validated before anything is written."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"--limit must be a positive integer, got {limit!r}")
    path = Path(path)
    records = read_function_jsonl(path)
    if limit is not None:
        records = records[:limit]
    items = [(rec, Provenance(generator=IMPORTER, source=f"{path.name}:{rec.task_id}")) for rec in records]
    return write_function_tasks(items, out, tags=["imported"])


IMPORT_FORMATS = {"function-jsonl": import_function_jsonl}


def import_tasks(fmt: str, path: Path, out: Path, *, limit: int | None = None) -> list[Task]:
    """Import with a named format; ConfigError naming the known formats otherwise."""
    try:
        importer = IMPORT_FORMATS[fmt]
    except KeyError:
        raise ConfigError(
            f"unknown import format {fmt!r} (known: {', '.join(sorted(IMPORT_FORMATS))})"
        ) from None
    return importer(path, out, limit=limit)


__all__ = [
    "FAMILY",
    "FunctionRecord",
    "import_function_jsonl",
    "import_tasks",
    "read_function_jsonl",
    "validate_record",
    "write_function_tasks",
]
