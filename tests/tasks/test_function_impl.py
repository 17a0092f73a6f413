"""function-jsonl import and the function-impl family: real files, real CLI, real sandboxes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.admission.check import check_task
from sparring.errors import ConfigError, TaskError
from sparring.judge.pytest_judge import PytestJudge
from sparring.tasks.families import FAMILIES, FamilyGenerator, generate
from sparring.tasks.families.function_impl import BUILTINS, GENERATOR, MAX_N
from sparring.tasks.importers import import_function_jsonl, import_tasks
from sparring.tasks.loader import TASK_FILE, find_tasks, load_task

SPARRING = Path(sys.executable).parent / "sparring"

RECORDS = [
    {
        "task_id": "HumanEval/0",
        "prompt": 'def add(a: int, b: int) -> int:\n    """Return a + b.\n    >>> add(2, 3)\n    5\n    """\n',
        "canonical_solution": "    return a + b\n",
        "test": "METADATA = {}\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
        "entry_point": "add",
    },
    {
        "task_id": "HumanEval/1",
        "prompt": 'from typing import List\n\n\ndef evens(xs: List[int]) -> List[int]:\n    """The even elements of xs, in order."""\n',
        "canonical_solution": "    return [x for x in xs if x % 2 == 0]\n",
        "test": "def check(candidate):\n    assert candidate([1, 2, 3, 4]) == [2, 4]\n    assert candidate([]) == []\n",
        "entry_point": "evens",
    },
    {
        "task_id": "Mbpp/7",
        "prompt": 'def shout(s: str) -> str:\n    """Uppercase s and add one "!"."""',
        "canonical_solution": "    return s.upper() + '!'",
        "test": "def check(candidate):\n    assert candidate('hi') == 'HI!'\n",
        "entry_point": "shout",
    },
]


def _write_jsonl(path: Path, records: list[dict[str, str]], extra_lines: tuple[str, ...] = ()) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(x + "\n" for x in extra_lines))
    return path


def _task_dirs(out: Path) -> list[Path]:
    return sorted(p.parent for p in out.rglob(TASK_FILE)) if out.exists() else []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([str(SPARRING), *args], capture_output=True, text=True, timeout=300, env=env)


# --------------------------------------------------------------------------- importer


def test_import_round_trip(tmp_path: Path) -> None:
    src = _write_jsonl(tmp_path / "he.jsonl", RECORDS)
    out = tmp_path / "out"
    tasks = import_function_jsonl(src, out)
    assert [t.id for t in tasks] == [
        "function-impl-humaneval-0",
        "function-impl-humaneval-1",
        "function-impl-mbpp-7",
    ]
    assert [t.id for t in find_tasks(out)] == sorted(t.id for t in tasks)
    t = load_task(out / "function-impl-humaneval-0")
    assert t.digest == tasks[0].digest
    assert t.spec.family == "function-impl"
    assert t.spec.judge.hidden_tests == ["test_hidden_humaneval_0.py::test_check"]
    assert t.spec.provenance.source == "he.jsonl:HumanEval/0"
    assert "`add`" in t.spec.instruction and "solution.py" in t.spec.instruction
    initial = (t.workspace / "solution.py").read_text()
    assert initial.startswith(RECORDS[0]["prompt"]) and initial.endswith("    raise NotImplementedError\n")
    assert (t.solution / "solution.py").read_text() == RECORDS[0]["prompt"] + RECORDS[0]["canonical_solution"]
    hidden = (t.hidden / "test_hidden_humaneval_0.py").read_text()
    assert hidden.startswith("from solution import add\n") and RECORDS[0]["test"].strip() in hidden
    assert "def test_check():\n    check(add)\n" in hidden
    assert (t.workspace / "tests" / "test_visible.py").is_file()
    # a prompt without a trailing newline still gives valid Python
    shout = load_task(out / "function-impl-mbpp-7")
    compile((shout.workspace / "solution.py").read_text(), "solution.py", "exec")
    compile((shout.solution / "solution.py").read_text(), "solution.py", "exec")
    # same input, same bytes
    again = import_function_jsonl(src, tmp_path / "again")
    assert [a.digest for a in again] == [t.digest for t in tasks]
    assert [x.id for x in import_function_jsonl(src, tmp_path / "lim", limit=2)] == [x.id for x in tasks[:2]]
    with pytest.raises(ConfigError, match="limit"):
        import_function_jsonl(src, tmp_path / "lim0", limit=0)
    with pytest.raises(ConfigError, match="unknown import format"):
        import_tasks("csv", src, tmp_path / "fmt")


def test_missing_file_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(TaskError, match="not found"):
        import_function_jsonl(tmp_path / "nope.jsonl", out)
    assert _task_dirs(out) == []


def test_bad_json_line_writes_nothing(tmp_path: Path) -> None:
    src = _write_jsonl(tmp_path / "bad.jsonl", RECORDS, ("{not json",))
    out = tmp_path / "out"
    with pytest.raises(TaskError) as e:
        import_function_jsonl(src, out)
    assert "line 4" in str(e.value) and "invalid JSON" in str(e.value) and "\n" not in str(e.value)
    assert _task_dirs(out) == []


@pytest.mark.parametrize("field", ["task_id", "prompt", "canonical_solution", "test", "entry_point"])
def test_missing_field_writes_nothing(tmp_path: Path, field: str) -> None:
    broken = {k: v for k, v in RECORDS[1].items() if k != field}
    src = _write_jsonl(tmp_path / "f.jsonl", [RECORDS[0], broken, RECORDS[2]])
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TaskError) as e:
        import_function_jsonl(src, out)
    assert "line 2" in str(e.value) and repr(field) in str(e.value) and "\n" not in str(e.value)
    assert _task_dirs(out) == [] and list(out.iterdir()) == []


def test_invalid_python_and_duplicates_rejected(tmp_path: Path) -> None:
    bad = {**RECORDS[0], "test": "def check(candidate):\n    assert ("}
    with pytest.raises(TaskError, match="line 1: field 'test' is not valid Python"):
        import_function_jsonl(_write_jsonl(tmp_path / "a.jsonl", [bad]), tmp_path / "o1")
    no_check = {**RECORDS[0], "test": "assert True\n"}
    with pytest.raises(TaskError, match="check"):
        import_function_jsonl(_write_jsonl(tmp_path / "b.jsonl", [no_check]), tmp_path / "o2")
    with pytest.raises(TaskError, match="line 2.*already used on line 1"):
        import_function_jsonl(_write_jsonl(tmp_path / "c.jsonl", [RECORDS[0], RECORDS[0]]), tmp_path / "o3")
    assert not any(_task_dirs(tmp_path / f"o{i}") for i in (1, 2, 3))


# --------------------------------------------------------------------------- CLI


def test_cli_import_json(tmp_path: Path) -> None:
    src = _write_jsonl(tmp_path / "he.jsonl", RECORDS)
    out = tmp_path / "out"
    r = _cli(
        "tasks", "import", "--format", "function-jsonl", str(src), "--out", str(out), "--limit", "2", "--json"
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (
        set(data) == {"format", "out", "tasks", "without_dynamic_tests"}
        and data["format"] == "function-jsonl"
    )
    assert data["out"] == str(out) and data["without_dynamic_tests"] == 0
    assert [t["id"] for t in data["tasks"]] == ["function-impl-humaneval-0", "function-impl-humaneval-1"]
    for t in data["tasks"]:
        assert set(t) == {"id", "digest", "path", "dynamic_tests"} and t["digest"].startswith("sha256:")
        assert t["dynamic_tests"] is True
        assert load_task(t["path"]).digest == t["digest"]


@pytest.mark.parametrize("case", ["missing", "bad_json", "missing_field", "bad_format"])
def test_cli_one_line_error(tmp_path: Path, case: str) -> None:
    fmt, src = "function-jsonl", tmp_path / "in.jsonl"
    if case == "bad_json":
        _write_jsonl(src, RECORDS[:1], ("[1, 2",))
    elif case == "missing_field":
        _write_jsonl(src, [{k: v for k, v in RECORDS[0].items() if k != "entry_point"}])
    elif case == "bad_format":
        _write_jsonl(src, RECORDS)
        fmt = "xml"
    out = tmp_path / "out"
    r = _cli("tasks", "import", "--format", fmt, str(src), "--out", str(out), "--json")
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert r.stdout == ""
    assert _task_dirs(out) == []


# --------------------------------------------------------------------------- generator


def test_generator_registered_deterministic_distinct(tmp_path: Path) -> None:
    gen = FAMILIES["function-impl"]
    assert isinstance(gen, FamilyGenerator) and gen.name == "function-impl"
    assert len(BUILTINS) >= 30 and len({b.name for b in BUILTINS}) == len(BUILTINS)
    a = generate("function-impl", len(BUILTINS), 3, tmp_path / "a")
    b = generate("function-impl", len(BUILTINS), 3, tmp_path / "b")
    assert [t.id for t in a] == [t.id for t in b] and [t.digest for t in a] == [t.digest for t in b]
    assert len({t.id for t in a}) == len(a) == len(BUILTINS)
    assert all(t.spec.provenance.generator == GENERATOR and t.spec.provenance.seed == 3 for t in a)
    # another seed: other order and other hidden inputs
    c = generate("function-impl", len(BUILTINS), 4, tmp_path / "c")
    assert [t.id for t in c] != [t.id for t in a] and sorted(t.id for t in c) == sorted(t.id for t in a)
    by_id = {t.id: t for t in a}
    for t in c:
        name = t.spec.judge.hidden_tests[0].split("::")[0]
        assert (t.hidden / name).read_text() != (by_id[t.id].hidden / name).read_text()
    small = generate("function-impl", 5, 3, tmp_path / "small")
    assert [t.id for t in small] == [t.id for t in a[:5]]
    with pytest.raises(ConfigError, match="only"):
        generate("function-impl", MAX_N + 1, 0, tmp_path / "too-many")
    with pytest.raises(ConfigError):
        generate("function-impl", 0, 0, tmp_path / "zero")


# --------------------------------------------------------------------------- admission (real sandboxes)


def test_admission_generated_and_imported(tmp_path: Path, backend) -> None:  # type: ignore[no-untyped-def]
    tasks = generate("function-impl", 3, 11, tmp_path / "gen")
    tasks += import_function_jsonl(_write_jsonl(tmp_path / "he.jsonl", RECORDS), tmp_path / "imp", limit=1)
    # negative control: a record whose reference solution is wrong must be rejected
    wrong = {**RECORDS[0], "task_id": "wrong/0", "canonical_solution": "    return a - b\n"}
    control = import_function_jsonl(_write_jsonl(tmp_path / "wrong.jsonl", [wrong]), tmp_path / "wrong")[0]
    judge = PytestJudge(backend)

    async def run_all():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(check_task(t, judge) for t in [*tasks, control]))

    *reports, rejected = asyncio.run(run_all())
    assert len(reports) == 4
    for rep in reports:
        assert rep.ok, (rep.id, [p.to_json() for p in rep.problems])
    assert [p.rule for p in rejected.problems] == ["solution_passes"]
