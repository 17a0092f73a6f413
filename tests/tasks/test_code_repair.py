"""The code-repair family: real generation, real pytest runs, no mocks.

A module-scoped fixture generates 50 tasks from seed 0 once; the tests check
their shape, determinism, that no original code leaks into workspace/, and
that the hidden suite fails on the initial state and passes with solution/
overlaid, the way the judge runs it (cwd = workspace, PYTHONPATH = workspace,
hidden/ mounted elsewhere).
"""

from __future__ import annotations

import ast
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparring.errors import ConfigError
from sparring.tasks.families import FAMILIES, FamilyGenerator, generate, get_family
from sparring.tasks.families.code_repair import GENERATOR, CodeRepairGenerator, candidate_order
from sparring.tasks.families.code_repair_sources import load_bases
from sparring.tasks.families.code_repair_sources.mutations import (
    DIFFICULTY,
    apply_mutation,
    enumerate_mutations,
    normalise,
)
from sparring.tasks.loader import Task, find_tasks, load_task

N = 50


@dataclass(frozen=True)
class Generated:
    tasks: list[Task]
    out: Path
    seconds: float


@pytest.fixture(scope="module")
def fifty(tmp_path_factory: pytest.TempPathFactory) -> Generated:
    out = tmp_path_factory.mktemp("code-repair-50")
    start = time.monotonic()
    tasks = generate("code-repair", N, 0, out)
    return Generated(tasks, out, time.monotonic() - start)


@dataclass(frozen=True)
class Run:
    returncode: int
    outcomes: dict[str, str]


def _overlay_solution(task: Task, ws: Path) -> None:
    files, deleted = task.solution_files()
    for rel, data in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(data)
    for rel in deleted:
        (ws / rel).unlink()


def _pytest(args: list[str], cwd: Path, junit: Path, pythonpath: Path | None) -> Run:
    # plugin autoload off: the judge's environment has bare pytest, and this venv's hypothesis plugin costs ~1.5 s
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    outcomes: dict[str, str] = {}
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            failed = any(child.tag in ("failure", "error") for child in case)
            module = str(case.get("classname")).rsplit(".", 1)[-1]
            outcomes[f"{module}.py::{case.get('name')}"] = "failed" if failed else "passed"
    return Run(proc.returncode, outcomes)


def judge_run(task: Task, with_solution: bool) -> Run:
    """Run the hidden tests as the judge does: hidden/ outside the workspace, every listed id."""
    with tempfile.TemporaryDirectory(prefix="cr-judge-") as tmp:
        ws, hidden = Path(tmp, "workspace"), Path(tmp, "judge", "hidden")
        shutil.copytree(task.workspace, ws)
        shutil.copytree(task.hidden, hidden)
        if with_solution:
            _overlay_solution(task, ws)
        args = [str(hidden / node_id) for node_id in task.spec.judge.hidden_tests]
        return _pytest(args, ws, Path(tmp, "junit.xml"), pythonpath=ws)


def visible_run(task: Task, with_solution: bool) -> Run:
    """The agent's view: `python -m pytest tests` from the workspace root."""
    with tempfile.TemporaryDirectory(prefix="cr-visible-") as tmp:
        ws = Path(tmp, "workspace")
        shutil.copytree(task.workspace, ws)
        if with_solution:
            _overlay_solution(task, ws)
        return _pytest(["tests"], ws, Path(tmp, "junit.xml"), pythonpath=None)


def _check_judging(task: Task) -> None:
    ids = set(task.spec.judge.hidden_tests)
    before = judge_run(task, with_solution=False)
    assert before.returncode == 1, task.id
    assert set(before.outcomes) == ids, task.id
    assert 0 < sum(v == "failed" for v in before.outcomes.values()) < len(ids), task.id
    after = judge_run(task, with_solution=True)
    assert after.returncode == 0, task.id
    assert set(after.outcomes) == ids and set(after.outcomes.values()) == {"passed"}, task.id


def _sample(tasks: list[Task], k: int = 6) -> list[Task]:
    return tasks[:: len(tasks) // k][:k]


# --------------------------------------------------------------------------- the generated set


def test_fifty_distinct_tasks(fifty: Generated) -> None:
    tasks = fifty.tasks
    assert len(tasks) == N
    assert len({t.id for t in tasks}) == N
    assert len({t.digest for t in tasks}) == N
    for t in tasks:
        assert t.path == (fifty.out / t.id).resolve()
        assert t.id.startswith(f"code-repair-{t.spec.provenance.source}-")
        assert len(t.id.rsplit("-", 1)[1]) == 8
    # distinct mutation sites: no two tasks carry the same bug
    diffs = {(t.spec.provenance.source, _diff(t)) for t in tasks}
    assert len(diffs) == N
    # a cost to watch, not a pass condition: CI shares its machine, so wall time says little about the code
    print(f"generating {N} tasks took {fifty.seconds:.1f}s")


def test_specs(fifty: Generated) -> None:
    base_names = {b.name for b in load_bases()}
    for t in fifty.tasks:
        s = t.spec
        kind, base = s.tags
        assert s.family == "code-repair"
        assert kind in DIFFICULTY and s.difficulty == DIFFICULTY[kind]
        assert base in base_names and s.provenance.source == base
        assert s.provenance.generator == GENERATOR and isinstance(s.provenance.seed, int)
        assert f"`{base}`" in s.instruction and "tests" in s.instruction
        assert "hidden tests" in s.success_criteria
        assert s.judge.kind == "pytest" and s.judge.weights == {"all_pass": 1.0}
        hidden_files = sorted(p.name for p in t.hidden.iterdir())
        assert len(hidden_files) == 1 and hidden_files[0].startswith("test_hidden_")
        assert all(node_id.startswith(f"{hidden_files[0]}::test_") for node_id in s.judge.hidden_tests)
        assert 8 <= len(s.judge.hidden_tests) <= 20
    assert len({t.spec.provenance.seed for t in fifty.tasks}) == N
    assert len({t.spec.tags[1] for t in fifty.tasks}) >= 10
    assert len({t.spec.tags[0] for t in fifty.tasks}) >= 6


def test_every_task_loads(fifty: Generated) -> None:
    for t in fifty.tasks:
        again = load_task(t.path)
        assert again.digest == t.digest and again.spec == t.spec
    assert [t.id for t in find_tasks(fifty.out)] == sorted(t.id for t in fifty.tasks)


def _solution_pair(t: Task) -> tuple[str, str, str]:
    files, deleted = t.solution_files()
    assert not deleted and len(files) == 1
    ((rel, data),) = files.items()
    return rel, data.decode(), (t.workspace / rel).read_text()


def _diff(t: Task) -> str:
    rel, solution, initial = _solution_pair(t)
    return rel + "".join(difflib.unified_diff(solution.splitlines(True), initial.splitlines(True), n=0))


def test_layout_and_no_leak_of_original(fifty: Generated) -> None:
    bases = {b.name: b for b in load_bases()}
    for t in fifty.tasks:
        base = bases[t.spec.provenance.source]
        rel, solution, initial = _solution_pair(t)
        assert rel in base.files and Path(rel).name != "__init__.py"
        expected = set(base.files) | {f"tests/test_{base.module}.py", "pytest.ini"}
        got = {p.relative_to(t.workspace).as_posix() for p in t.workspace.rglob("*") if p.is_file()}
        assert got == expected, t.id
        # the solution is the original in canonical form; the bug is the only difference
        assert solution == normalise(base.files[rel])
        assert initial != solution
        changed = [ln for ln in _diff(t).splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
        assert 1 <= len(changed) <= 6, (t.id, changed)
        # neither the canonical nor the raw original appears anywhere in workspace/
        for p in t.workspace.rglob("*"):
            if p.is_file():
                text = p.read_text()
                assert solution not in text and base.files[rel].strip() not in text, (t.id, p)
        # other package files are canonical too, so formatting does not point at the bug
        for other, src in base.files.items():
            if other != rel:
                assert (t.workspace / other).read_text() == normalise(src)


def test_visible_tests_are_a_subset_with_signal(fifty: Generated) -> None:
    for t in fifty.tasks:
        base = next(b for b in load_bases() if b.name == t.spec.provenance.source)
        visible = ast.parse((t.workspace / "tests" / f"test_{base.module}.py").read_text())
        names = {n.name for n in visible.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}
        hidden = {node_id.split("::")[1] for node_id in t.spec.judge.hidden_tests}
        assert names < hidden
        assert len(hidden) // 2 == len(names)
    for t in _sample(fifty.tasks):
        before = visible_run(t, with_solution=False)
        assert before.returncode == 1 and "failed" in before.outcomes.values(), t.id
        assert visible_run(t, with_solution=True).returncode == 0, t.id


def test_hidden_fail_then_solution_passes_sample(fifty: Generated) -> None:
    for t in _sample(fifty.tasks):
        _check_judging(t)


@pytest.mark.slow
def test_hidden_fail_then_solution_passes_all(fifty: Generated) -> None:
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(_check_judging, fifty.tasks))


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_digests(fifty: Generated, tmp_path: Path) -> None:
    a = generate("code-repair", 12, 0, tmp_path / "a")
    b = generate("code-repair", 12, 0, tmp_path / "b")
    assert [t.digest for t in a] == [t.digest for t in b]
    # a smaller n from the same seed is a prefix of the larger set
    assert [t.digest for t in a] == [t.digest for t in fifty.tasks[:12]]


@pytest.mark.slow
def test_same_seed_same_digests_fifty(fifty: Generated, tmp_path: Path) -> None:
    again = generate("code-repair", N, 0, tmp_path)
    assert [t.digest for t in again] == [t.digest for t in fifty.tasks]


def test_different_seed_different_set(fifty: Generated, tmp_path: Path) -> None:
    other = generate("code-repair", 12, 1, tmp_path)
    assert len({t.id for t in other}) == 12
    assert {t.id for t in other} != {t.id for t in fifty.tasks[:12]}
    assert {t.digest for t in other}.isdisjoint({t.digest for t in fifty.tasks[:12]})


def test_candidate_order_depends_only_on_seed() -> None:
    gen = CodeRepairGenerator()
    keys = [[m.site for _, m in candidate_order(gen.bases(), seed)] for seed in (3, 3, 4)]
    assert keys[0] == keys[1] != keys[2]
    assert sorted(keys[0]) == sorted(keys[2])


# --------------------------------------------------------------------------- registry and errors


def test_registry() -> None:
    gen = get_family("code-repair")
    assert FAMILIES["code-repair"] is gen
    assert isinstance(gen, FamilyGenerator)
    assert (gen.name, gen.version) == ("code-repair", "1")


def test_unknown_family(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^unknown family 'x' \(known: .*code-repair.*\)$"):
        generate("x", 1, 0, tmp_path)


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "3"])
def test_bad_n(tmp_path: Path, n: object) -> None:
    with pytest.raises(ConfigError):
        generate("code-repair", n, 0, tmp_path)  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())


def test_n_beyond_capacity(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="code-repair"):
        generate("code-repair", 100_000, 0, tmp_path)
    assert not any(tmp_path.iterdir())


# --------------------------------------------------------------------------- the library and the mutator


def test_library_has_enough_bases_and_sites() -> None:
    gen = CodeRepairGenerator()
    bases = gen.bases()
    assert len(bases) >= 10
    for b in bases:
        assert len(b.files) >= 3, b.name  # __init__ + module + a module it imports
        tests = [n for n in ast.parse(b.source.tests).body if isinstance(n, ast.FunctionDef)]
        assert 8 <= sum(n.name.startswith("test_") for n in tests) <= 20, b.name
        assert f"{b.source.name}/{b.source.module}.py" in b.files
    sites = {(m.base, m.location) for b in bases for m in b.mutations}
    assert len(sites) >= 200
    assert {m.kind for b in bases for m in b.mutations} == set(DIFFICULTY)


SAMPLE = """
def f(xs, k=2, flag=True):
    if not xs:
        return 0
    total = 0
    for i in range(len(xs)):
        if xs[i] < k and flag:
            total += xs[i] * 2
    return max(total, k)


def g(n):
    i = 0
    while i < n:
        i += 1
    return i
"""


@pytest.mark.parametrize(
    ("kind", "variant", "expected"),
    [
        ("operator-swap", "Mult->Add", "total += xs[i] + 2"),
        ("comparison-flip", "0:Lt->LtE", "if xs[i] <= k and flag:"),
        ("boolean-swap", "And->Or", "if xs[i] < k or flag:"),
        ("off-by-one", "stop-1", "for i in range(len(xs) - 1):"),
        ("wrong-default", "+1", "def f(xs, k=3, flag=True):"),
        ("wrong-default", "True->False", "def f(xs, k=2, flag=False):"),
        ("swapped-args", "0<->1", "return max(k, total)"),
    ],
)
def test_mutation_kinds(kind: str, variant: str, expected: str) -> None:
    source = normalise(SAMPLE)
    matches = [
        m for m in enumerate_mutations("sample", "f.py", source) if (m.kind, m.variant) == (kind, variant)
    ]
    hits = [s for s in (apply_mutation(source, m) for m in matches) if expected in s]
    assert len(hits) == 1
    mutated = hits[0]
    changed = [d for d in difflib.ndiff(source.splitlines(), mutated.splitlines()) if d[:1] in "+-"]
    assert len(changed) == 2
    compile(mutated, "f.py", "exec")


def test_removed_edge_case_and_constants() -> None:
    source = normalise(SAMPLE)
    muts = enumerate_mutations("sample", "f.py", source)
    (drop,) = [m for m in muts if m.kind == "removed-edge-case"]
    assert "if not xs" not in apply_mutation(source, drop)
    ints = [m for m in muts if m.kind == "off-by-one" and m.variant in ("+1", "-1")]
    mutated = {apply_mutation(source, m) for m in ints}
    assert len(mutated) == len(ints)
    assert "i += 2" in "".join(mutated)
    # `i += 1` never becomes `i += 0` (a guaranteed hang); defaults are wrong-default only
    assert not any("i += 0" in s or "k=1" in s or "k=3" in s for s in mutated)
    assert enumerate_mutations("sample", "f.py", source) == muts
