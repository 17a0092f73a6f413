"""The ``function-jsonl`` importer.

``function-jsonl`` is the HumanEval/MBPP-style format: one JSON object per
line with ``task_id``, ``prompt`` (signature + docstring), ``canonical_solution``
(the body), ``test`` (defines ``check(candidate)``) and ``entry_point``. Each
record becomes a task of family ``function-impl``:

    workspace/solution.py             prompt + ``raise NotImplementedError``
    workspace/tests/test_visible.py   smoke test: the module imports, the function exists
    workspace/pytest.ini              pythonpath = .
    hidden/test_hidden_<id>.py        the record's test, run as one test: check(<entry_point>)
    hidden/dynamic.json               generated tests: the asserts' literal arguments, mutated
    hidden/.admission/hacks/          a lookup table of the asserts, and a call-counting reference
    solution/solution.py              prompt + canonical_solution

``dynamic.json`` and the hacks it defeats are written only for a record whose
test has at least one ``assert candidate(<literals>) == <literal>``
(:func:`mutation_spec`); without them a table of the fixed asserts would pass.

The ``function-impl`` generator family writes its built-in records through
the same code (:func:`write_function_tasks`), so both share one path.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring import pyast
from sparring.errors import ConfigError, TaskError
from sparring.tasks.dynamic_format import DYNAMIC_FILE, NotInputData, to_input
from sparring.tasks.environment import pinned_requirements
from sparring.tasks.importers.rows import record_lines
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
    tree = pyast.parse(source)
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
    """Every record of a function-jsonl file (plain, ``.jsonl.gz`` or Parquet), validated; TaskError naming
    the line (row) and field of the first bad one."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"input file not found: {path} (pass a function-jsonl file)")
    lines = record_lines(path)
    records: list[FunctionRecord] = []
    seen: dict[str, int] = {}
    for n, text in lines:
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


# --------------------------------------------------------------------------- generated tests


def assert_examples(test: str) -> list[tuple[tuple[Any, ...], Any]]:
    """(args, expected) of every ``assert candidate(literals) == literal`` (or ``is``) in a record's test."""
    out = []
    for node in ast.walk(pyast.parse(test)):
        if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)):
            continue
        cmp = node.test
        call = cmp.left
        if (
            len(cmp.ops) != 1
            or not isinstance(cmp.ops[0], (ast.Eq, ast.Is))
            or not isinstance(call, ast.Call)
        ):
            continue
        if not (isinstance(call.func, ast.Name) and call.func.id == "candidate") or call.keywords:
            continue
        try:
            args = tuple(ast.literal_eval(a) for a in call.args)
            expected = ast.literal_eval(cmp.comparators[0])
        except (ValueError, TypeError, SyntaxError):
            continue
        out.append((args, expected))
    return out


def admission_hacks(rec: FunctionRecord) -> dict[str, str]:
    """Hacks admission must score zero, which only the generated tests can catch (hidden/.admission/hacks/):

    ``hidden_lookup``   a table of the fixed hidden tests' inputs and outputs (as if memorised or leaked);
    ``call_counting``   the reference for as many calls as the hidden tests make, then wrong answers.
    """
    examples = assert_examples(rec.test)
    table = {repr(args): expected for args, expected in examples}
    lookup = f"_KNOWN = {table!r}\n\n\ndef {rec.entry_point}(*args):\n    return _KNOWN.get(repr(args))\n"
    n_calls = rec.test.count("candidate(")
    counting = (
        rec.solution_source() + f"\n\n_calls = [0]\n_real = {rec.entry_point}\n\n\n"
        f"def {rec.entry_point}(*args):\n    _calls[0] += 1\n"
        f"    return _real(*args) if _calls[0] <= {n_calls} else None\n"
    )
    base = ".admission/hacks"
    return {
        f"{base}/hidden_lookup/{SOLUTION_FILE}": lookup,
        f"{base}/call_counting/{SOLUTION_FILE}": counting,
    }


IMPORT_CASES = 40
IMPORT_REPEAT = 2
IMPORT_CALL_TIMEOUT_S = 2.0
"""Per call: a mutated input on which the reference runs longer is unusable (the candidate gets this too)."""


def mutation_spec(rec: FunctionRecord) -> dict[str, Any] | None:
    """The ``hidden/dynamic.json`` of an imported record, or None if its test has no usable literal assert.

    Each argument position mutates the literal values the asserts pass there
    (:mod:`sparring.judge.dynamic.mutation`). Asserts with the most common number of arguments are used (a
    function with defaults may be called with fewer); an assert with a value that cannot cross to the
    driver as input JSON is left out. Mutated inputs may leave the documented domain, so an input on
    which the reference raises or times out is unusable (``reference_raises: skip``), never the
    candidate's fault.
    """
    rows = []
    for args, _ in assert_examples(rec.test):
        try:
            rows.append([to_input(a) for a in args])
        except NotInputData:
            continue
    if not rows:
        return None
    arity = max(Counter(len(r) for r in rows).items(), key=lambda kv: (kv[1], kv[0]))[0]
    if arity == 0:
        return None
    seeds: list[dict[str, list[Any]]] = []
    for i in range(arity):
        seen: dict[str, Any] = {}
        for r in rows:
            if len(r) == arity:
                seen.setdefault(json.dumps(r[i], sort_keys=True), r[i])
        seeds.append({"mutate": list(seen.values())})
    return {"module": "solution", "function": rec.entry_point, "cases": IMPORT_CASES, "repeat": IMPORT_REPEAT,
            "reference_raises": "skip", "call_timeout_s": IMPORT_CALL_TIMEOUT_S, "args": seeds}  # fmt: skip


def dynamic_hidden_files(rec: FunctionRecord, spec: dict[str, Any]) -> dict[str, str | bytes]:
    """``hidden/dynamic.json`` from ``spec`` and the admission hacks only it defeats (built-ins and imports)."""
    return {DYNAMIC_FILE: json.dumps(spec, indent=1, sort_keys=True) + "\n", **admission_hacks(rec)}


def imported_dynamic_files(rec: FunctionRecord) -> dict[str, str | bytes]:
    """An imported task's extra hidden files: ``dynamic.json`` and the admission hacks it defeats
    (none for a record without a usable literal assert)."""
    spec = mutation_spec(rec)
    return {} if spec is None else dynamic_hidden_files(rec, spec)


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


@dataclass(frozen=True)
class RecordMeta:
    """Per-record task metadata a generator knows: tags added to the call's and the difficulty tier."""

    tags: tuple[str, ...] = ()
    difficulty: int = 1


def write_function_tasks(
    items: Sequence[tuple[FunctionRecord, Provenance]],
    out: Path,
    tags: Sequence[str] = (),
    extra_hidden: Callable[[FunctionRecord], dict[str, str | bytes]] | None = None,
    meta: Callable[[FunctionRecord], RecordMeta] | None = None,
) -> list[Task]:
    """Write each record's task to out/<task id>/ (each atomically); if one fails, remove what this call wrote.

    ``extra_hidden(record)`` adds judge-only files to a task's hidden/ (the function-impl family's
    generated-test spec and admission hacks); ``meta(record)`` gives a record its own tags and tier."""
    out = Path(out)
    metas = [meta(rec) if meta is not None else RecordMeta() for rec, _ in items]
    built = [
        function_task(rec, prov, [*tags, *m.tags], m.difficulty)
        for (rec, prov), m in zip(items, metas, strict=True)
    ]  # spec errors surface before any write
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
    return write_function_tasks(items, out, tags=["imported"], extra_hidden=imported_dynamic_files)


__all__ = [
    "FAMILY",
    "FunctionRecord",
    "RecordMeta",
    "admission_hacks",
    "assert_examples",
    "dynamic_hidden_files",
    "import_function_jsonl",
    "imported_dynamic_files",
    "mutation_spec",
    "read_function_jsonl",
    "validate_record",
    "write_function_tasks",
]
