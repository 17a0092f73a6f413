"""function-jsonl as published: gzip-compressed (HumanEval's own .jsonl.gz) and Parquet (HF datasets
exports) import to the same tasks as plain JSONL; a corrupt file is a one-line error naming it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.errors import TaskError
from sparring.tasks.importers import import_function_jsonl, read_function_jsonl

SPARRING = Path(sys.executable).parent / "sparring"
RECORDS = [
    {"task_id": "HumanEval/0", "entry_point": "add", "canonical_solution": "    return a + b\n",
     "prompt": 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n',
     "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"},
    {"task_id": "HumanEval/1", "entry_point": "neg", "canonical_solution": "    return -x\n",
     "prompt": 'def neg(x: int) -> int:\n    """Return -x (é: not ASCII)."""\n',
     "test": "def check(candidate):\n    assert candidate(2) == -2\n"},
]  # fmt: skip


def _jsonl(records: list[dict[str, str]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def _solutions(root: Path) -> dict[str, str]:
    return {p.parent.parent.name: p.read_text() for p in sorted(root.glob("*/solution/solution.py"))}


def test_gzip_jsonl_imports_like_the_plain_file_through_the_cli(tmp_path: Path) -> None:
    plain, packed = tmp_path / "he.jsonl", tmp_path / "HumanEval.jsonl.gz"
    plain.write_bytes(_jsonl(RECORDS))
    packed.write_bytes(gzip.compress(_jsonl(RECORDS), mtime=0))
    with pytest.raises(UnicodeDecodeError):
        packed.read_bytes().decode("utf-8")  # control: the file as shipped is not UTF-8 text
    r = subprocess.run([str(SPARRING), "tasks", "import", "--format", "function-jsonl", str(packed), "--out",
                        str(tmp_path / "gz"), "--json"], capture_output=True, text=True, timeout=300,
                       env=os.environ.copy())  # fmt: skip
    assert r.returncode == 0, r.stderr
    import_function_jsonl(plain, tmp_path / "plain")
    assert (
        _solutions(tmp_path / "gz") == _solutions(tmp_path / "plain")
        and len(_solutions(tmp_path / "gz")) == 2
    )


def test_parquet_export_imports_like_the_plain_file(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    plain, par = tmp_path / "he.jsonl", tmp_path / "test-00000-of-00001.parquet"
    plain.write_bytes(_jsonl(RECORDS))
    pq.write_table(pa.Table.from_pylist(RECORDS), par)
    assert [r.task_id for r in read_function_jsonl(par)] == ["HumanEval/0", "HumanEval/1"]
    import_function_jsonl(plain, tmp_path / "plain")
    import_function_jsonl(par, tmp_path / "par")
    assert _solutions(tmp_path / "par") == _solutions(tmp_path / "plain")


def test_corrupt_gzip_and_bad_records_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "cut.jsonl.gz"
    bad.write_bytes(gzip.compress(_jsonl(RECORDS))[:-12])
    with pytest.raises(TaskError, match="cut.jsonl.gz: a truncated or corrupt gzip file"):
        read_function_jsonl(bad)
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"task_id": "x"}\n'))
    with pytest.raises(TaskError, match="broken.jsonl.gz line 1"):
        read_function_jsonl(broken)
