"""`tasks import --format swe-bench` on a small git repository built here: a package with a bug, a fix
commit and a test commit. The imported task is admitted, its reference scores 1 and the untouched
workspace 0, the workspace holds no trace of the fix, and bad instances are one line each with
nothing written."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.importers import import_tasks
from sparring.tasks.importers.batch import RecordErrors
from sparring.tasks.loader import Task, find_tasks, solution_diff
from tests_support import oracle_rollout

SPARRING = Path(sys.executable).parent / "sparring"
FIX_LINE = "    return a + b  # carry-fix-4b1e"

CALC_BASE = '''def add(a, b):
    """Return a + b."""
    return a - b


def mul(a, b):
    return a * b
'''
TESTS_BASE = """from mathpkg.calc import add, mul


def test_mul():
    assert mul(3, 4) == 12


def test_add_zero():
    assert add(5, 0) == 5
"""
TESTS_NEW = (
    TESTS_BASE
    + """

def test_add():
    assert add(2, 3) == 5
    assert add(-1, 1) == 0


class TestMore:
    def test_add_many(self):
        assert add(10, 20) == 30

    def test_unlisted(self):
        assert False, "not named by any id: must not run"
"""
)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout  # fmt: skip


def _write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> dict[str, str | Path]:
    """owner/mathpkg: base (bug), then the fix, then the tests for it; the repository keeps all three."""
    root = tmp_path_factory.mktemp("repos")
    r = root / "owner__mathpkg"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    _write(r, "mathpkg/__init__.py", "")
    _write(r, "mathpkg/calc.py", CALC_BASE)
    _write(r, "tests/test_calc.py", TESTS_BASE)
    _write(r, "README.md", "mathpkg\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "base")
    base = _git(r, "rev-parse", "HEAD").strip()
    _write(r, "mathpkg/calc.py", CALC_BASE.replace("    return a - b", FIX_LINE))
    _git(r, "commit", "-q", "-am", "fix add")
    patch = _git(r, "diff", base, "HEAD")
    fix = _git(r, "rev-parse", "HEAD").strip()
    _write(r, "tests/test_calc.py", TESTS_NEW)
    _git(r, "commit", "-q", "-am", "test add")
    test_patch = _git(r, "diff", fix, "HEAD")
    return {"root": root, "repo": r, "base": base, "patch": patch, "test_patch": test_patch}


def _instance(fx: dict[str, str | Path], /, **over: object) -> dict[str, object]:
    inst: dict[str, object] = {
        "instance_id": "owner__mathpkg-1", "repo": "owner/mathpkg", "base_commit": fx["base"],
        "patch": fx["patch"], "test_patch": fx["test_patch"],
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add", "tests/test_calc.py::TestMore::test_add_many"]),
        "PASS_TO_PASS": ["tests/test_calc.py::test_mul", "tests/test_calc.py::test_add_zero"],
        "problem_statement": "add() subtracts its arguments instead of adding them: add(2, 3) returns -1.",
        "version": "0.1",
    }  # fmt: skip
    inst.update(over)
    return inst


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def imported(repo, tmp_path_factory) -> dict[str, Task]:
    """The good instance, and one whose FAIL_TO_PASS test already passes on the base (imports; admission
    must reject it)."""
    d = tmp_path_factory.mktemp("swe")
    passes_on_base = _instance(repo, instance_id="owner__mathpkg-2",
                               FAIL_TO_PASS=["tests/test_calc.py::test_mul"], PASS_TO_PASS=[])  # fmt: skip
    src = _jsonl(d / "instances.jsonl", [_instance(repo), passes_on_base])
    tasks = import_tasks("swe-bench", src, d / "tasks", repos=repo["root"])  # type: ignore[arg-type]
    return {t.id: t for t in tasks}


@pytest.fixture(scope="module")
def judge(backend) -> PytestJudge:
    return PytestJudge(backend, config=JudgeConfig(shuffle_seed=1))


def test_task_layout_hides_the_fix_and_the_test_patch(imported, repo) -> None:
    t = imported["swe-bench-owner-mathpkg-1"]
    files = [p for p in t.workspace.rglob("*")]
    assert not any(p.name == ".git" for p in files), "no version control in the workspace"
    assert (t.workspace / "mathpkg" / "calc.py").read_text() == CALC_BASE
    for p in files:
        if p.is_file():
            data = p.read_bytes()
            assert b"carry-fix-4b1e" not in data and b"test_add_many" not in data, p
    # Control: the repository itself does hold the fix in its history (what an exported tree leaves out).
    assert "carry-fix-4b1e" in _git(repo["repo"], "log", "-p")  # type: ignore[arg-type]
    assert FIX_LINE in (t.solution / "mathpkg" / "calc.py").read_text()
    hidden = (t.hidden / "test_tests__test_calc.py").read_text()
    assert "def test_add_many" in hidden and "test_unlisted" not in hidden
    assert t.spec.judge.hidden_tests == [
        "test_tests__test_calc.py::test_add", "test_tests__test_calc.py::TestMore::test_add_many",
        "test_tests__test_calc.py::test_mul", "test_tests__test_calc.py::test_add_zero",
    ]  # fmt: skip
    assert "subtracts its arguments" in t.spec.instruction and t.spec.family == "swe-bench"


def test_reference_scores_one_and_the_untouched_workspace_zero(imported, judge) -> None:
    t = imported["swe-bench-owner-mathpkg-1"]
    ref = asyncio.run(judge.score(t, solution_diff(t)))
    assert ref.reward == 1.0 and not ref.flags, (ref.per_test, ref.log[-800:])
    start = asyncio.run(judge.score(t, WorkspaceDiff()))
    assert start.reward == 0.0
    assert start.per_test["test_tests__test_calc.py::test_add"] != "passed"
    assert start.per_test["test_tests__test_calc.py::test_mul"] == "passed"
    assert "test_tests__test_calc.py::TestMore::test_unlisted" not in ref.per_test  # only the listed ids ran


@pytest.mark.slow
def test_admission_passes_the_instance_and_rejects_a_fail_to_pass_test_passing_on_base(imported) -> None:
    dirs = [str(t.path) for t in imported.values()]
    r = subprocess.run([str(SPARRING), "tasks", "check", *dirs, "--json", "--repeats", "2", "--no-store"],
                       capture_output=True, text=True, timeout=900, env=os.environ.copy())  # fmt: skip
    by_id = {t["id"]: t for t in json.loads(r.stdout)["tasks"]}
    assert by_id["swe-bench-owner-mathpkg-1"]["ok"], by_id["swe-bench-owner-mathpkg-1"]["problems"]
    bad = by_id["swe-bench-owner-mathpkg-2"]
    assert not bad["ok"] and r.returncode == 1
    rules = {p["rule"]: p["detail"] for p in bad["problems"]}
    assert (
        "FAIL_TO_PASS test tests/test_calc.py::test_mul of owner__mathpkg-2 already passes"
        in rules["initial_outcomes"]
    )


def test_bad_instances_are_one_line_each_and_nothing_is_written(repo, tmp_path) -> None:
    broken = {k: v for k, v in _instance(repo).items() if k != "test_patch"}
    rows = [
        _instance(repo, instance_id="ok-1"),
        broken,
        _instance(repo, instance_id="other", repo="someone/unknown"),
        _instance(repo, instance_id="nocommit", base_commit="0123456789abcdef0123456789abcdef01234567"),
        _instance(repo, instance_id="badpatch", patch=repo["patch"].replace("-    return a - b", "-    return a / b")),  # type: ignore[union-attr]
    ]  # fmt: skip
    src = _jsonl(tmp_path / "bad.jsonl", rows)
    out = tmp_path / "out"
    with pytest.raises(RecordErrors) as e:
        import_tasks("swe-bench", src, out, repos=repo["root"])  # type: ignore[arg-type]
    p = e.value.problems
    assert len(p) == 4 and all("\n" not in x for x in p), p
    assert "line 2 (owner__mathpkg-1): missing field 'test_patch'" in p[0]
    assert "(other): unknown repo 'someone/unknown'" in p[1]
    assert "(nocommit): base commit 0123456789abcdef" in p[2] and "not in the repository" in p[2]
    assert "(badpatch): the gold patch does not apply" in p[3]
    assert "4 of 5 instances rejected, nothing written" in str(e.value)
    assert not out.exists()
    r = subprocess.run([str(SPARRING), "tasks", "import", "--format", "swe-bench", str(src), "--out", str(out),
                        "--repos", str(repo["root"])], capture_output=True, text=True, timeout=300,
                       env=os.environ.copy())  # fmt: skip
    assert r.returncode != 0 and "unknown repo" in r.stderr and "4 of 5 instances rejected" in r.stderr
    assert not out.exists()


def test_repository_as_an_archive_or_a_single_repo_imports_the_same(repo, tmp_path) -> None:
    arch_dir = tmp_path / "archives"
    arch_dir.mkdir()
    with tarfile.open(arch_dir / "mathpkg.tar.gz", "w:gz") as tf:
        tf.add(repo["repo"], arcname="mathpkg")  # type: ignore[arg-type]
    src = _jsonl(tmp_path / "one.jsonl", [_instance(repo)])
    a = import_tasks("swe-bench", src, tmp_path / "a", repos=arch_dir)
    b = import_tasks("swe-bench", src, tmp_path / "b", repos=repo["repo"])  # type: ignore[arg-type]
    c = import_tasks("swe-bench", src, tmp_path / "c", repos=repo["root"])  # type: ignore[arg-type]
    assert a[0].digest == b[0].digest == c[0].digest
    packed = tmp_path / "one.jsonl.gz"
    packed.write_bytes(gzip.compress(src.read_bytes()))
    d = import_tasks("swe-bench", packed, tmp_path / "d", repos=repo["repo"])  # type: ignore[arg-type]
    assert d[0].spec.judge == a[0].spec.judge and d[0].spec.instruction == a[0].spec.instruction
    assert [t.id for t in find_tasks(tmp_path / "a")] == ["swe-bench-owner-mathpkg-1"]


@pytest.mark.slow
def test_the_oracle_policy_scores_one_in_a_rollout(imported, tmp_path) -> None:
    """The oracle as training runs it: through the task's tools in the agent's sandbox, then the judge."""
    data = oracle_rollout(next(iter(imported.values())).path.parent, tmp_path / "s.db")
    assert data["statuses"] == {"ok": len(imported)} and data["reward_mean"] == 1.0, data
