"""The registry (versions side by side, references), drift detection, and bad input through the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.admission.check import admission_record, check_tasks, store_admission
from sparring.admission.regress import regress
from sparring.errors import TaskError
from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.local.backend import LocalBackend
from sparring.tasks.environment import build_layer
from sparring.tasks.loader import find_tasks, load_admission, load_task, write_task
from sparring.tasks.registry import Registry
from tests_support import make_clamp_task

EXE = [sys.executable, "-m", "sparring.cli.main"]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXE, *args], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )


def bump(task_dir: Path, out: Path, version: int) -> Path:
    t = load_task(task_dir)
    spec = t.spec.model_copy(update={"version": version, "instruction": t.spec.instruction + " Version two."})
    files = {
        p.relative_to(t.workspace).as_posix(): p.read_bytes() for p in t.workspace.rglob("*") if p.is_file()
    }
    hidden = {p.relative_to(t.hidden).as_posix(): p.read_bytes() for p in t.hidden.rglob("*") if p.is_file()}
    sol, _ = t.solution_files()
    return write_task(out, spec, files, hidden, dict(sol)).path  # type: ignore[arg-type]


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_versions_side_by_side_and_every_kind_of_reference(tmp_path: Path) -> None:
    v1 = make_clamp_task(tmp_path / "src" / "v1")
    v2 = load_task(bump(v1.path, tmp_path / "src" / "v2", 2))
    reg = Registry(tmp_path / "lib")
    added, same = reg.add([v1, v2])
    assert [(t.id, t.spec.version) for t in added] == [("clamp-bug", 1), ("clamp-bug", 2)] and same == []
    assert [t.spec.version for t in reg.versions("clamp-bug")] == [1, 2]
    assert reg.resolve("clamp-bug").digest == v2.digest  # newest
    assert reg.resolve("clamp-bug@1").digest == v1.digest
    assert reg.resolve(v1.digest).digest == v1.digest
    assert reg.resolve(v2.digest.removeprefix("sha256:")[:12]).digest == v2.digest
    # Adding the same bytes again changes nothing.
    assert reg.add([v1]) == ([], [reg.resolve("clamp-bug@1")])


def test_a_version_is_immutable(tmp_path: Path) -> None:
    v1 = make_clamp_task(tmp_path / "v1")
    reg = Registry(tmp_path / "lib")
    reg.add([v1])
    before = snapshot(reg.root)
    (v1.workspace / "mathx" / "core.py").write_text("# changed\n")
    with pytest.raises(TaskError, match="immutable"):
        reg.add([load_task(v1.path)])
    assert snapshot(reg.root) == before


@pytest.mark.parametrize(
    "ref,needle",
    [("sha256:" + "0" * 64, "no task"), ("abcdef12", "no task"), ("nope", "no task"), ("clamp-bug@9", "no version 9"),
     ("clamp-bug@x", "bad version")],
)  # fmt: skip
def test_unresolvable_references(tmp_path: Path, ref: str, needle: str) -> None:
    reg = Registry(tmp_path / "lib")
    reg.add([make_clamp_task(tmp_path / "v1")])
    with pytest.raises(TaskError, match=needle):
        reg.resolve(ref)


def test_ambiguous_digest_prefix(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "lib")
    tasks = [make_clamp_task(tmp_path / f"t{i}", task_id=f"clamp-{i}") for i in range(40)]
    reg.add(tasks)
    firsts = [t.digest.removeprefix("sha256:")[0] for t in tasks]
    common = max(set(firsts), key=firsts.count)
    assert firsts.count(common) > 1
    with pytest.raises(TaskError, match="ambiguous"):
        reg.resolve("sha256:" + common)
    with pytest.raises(TaskError, match="not a digest"):
        reg.resolve("sha256:xyz")
    prefix6 = tasks[firsts.index(common)].digest.removeprefix("sha256:")[:6]
    assert reg.resolve(prefix6).id in {t.id for t in tasks}


def test_cli_add_list_show(tmp_path: Path) -> None:
    v1 = make_clamp_task(tmp_path / "src" / "v1")
    bump(v1.path, tmp_path / "src" / "v2", 2)
    lib = str(tmp_path / "lib")
    r = cli("tasks", "add", str(tmp_path / "src"), "--library", lib, "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["added"]) == 2
    r = cli("tasks", "list", "--library", lib, "--json")
    rows = json.loads(r.stdout)["tasks"]
    assert [(x["id"], x["version"]) for x in rows] == [("clamp-bug", 1), ("clamp-bug", 2)]
    r = cli("tasks", "show", "clamp-bug@1", "--library", lib, "--json")
    shown = json.loads(r.stdout)
    assert shown["version"] == 1 and [v["version"] for v in shown["versions"]] == [1, 2]


@pytest.mark.parametrize(
    "args",
    [
        ["tasks", "show", "sha256:" + "f" * 64],
        ["tasks", "show", "no-such-task@3"],
        ["tasks", "generate", "no-such-family", "--n", "2", "--out", "OUT"],
        ["tasks", "check", "MISSING"],
        ["tasks", "add", "BROKEN"],
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(tmp_path: Path, args: list[str]) -> None:
    lib = tmp_path / "lib"
    Registry(lib).add([make_clamp_task(tmp_path / "ok")])
    broken = tmp_path / "broken"
    (broken / "workspace").mkdir(parents=True)
    (broken / "task.toml").write_text("id = [oops\n")
    before = snapshot(tmp_path)
    subst = {"OUT": str(tmp_path / "out"), "MISSING": str(tmp_path / "missing"), "BROKEN": str(broken)}
    r = (
        cli(*[subst.get(a, a) for a in args], "--library", str(lib))
        if args[1] in ("show", "add")
        else cli(*[subst.get(a, a) for a in args])
    )
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert snapshot(tmp_path) == before


def test_regress_reports_a_task_whose_outcome_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task whose hidden test depends on a file of the environment layer; then the layer drifts.
    cache = tmp_path / "envs"
    monkeypatch.setenv("SPARRING_ENV_CACHE", str(cache))
    judge = PytestJudge(LocalBackend())
    t = make_clamp_task(tmp_path / "t")
    hidden = t.hidden / "test_hidden_clamp.py"
    hidden.write_text(
        hidden.read_text()
        + "\n\ndef test_env():\n    import iniconfig\n    assert not hasattr(iniconfig, 'DRIFT')\n"
    )
    t = load_task(t.path)
    (rep,) = asyncio.run(check_tasks([t], judge, repeats=1))
    assert rep.ok, rep.to_json()
    store_admission(t, admission_record(rep, 1, build_layer(t.spec.environment, cache).digest))
    assert load_admission(t) is not None
    drifts, skipped = asyncio.run(regress([t], judge))
    assert skipped == [] and [d.changes for d in drifts] == [[]]

    layer = build_layer(t.spec.environment, cache)
    init = next(layer.path.rglob("iniconfig/__init__.py"))
    init.chmod(0o644)
    init.write_text(init.read_text() + "\nDRIFT = True\n")
    drifts, _ = asyncio.run(regress([t], judge))
    (d,) = drifts
    assert any("test_env" in c and "passed -> failed" in c for c in d.changes), d.changes


def test_check_accepts_library_refs_and_stores_the_result_with_the_version(tmp_path: Path) -> None:
    v1 = make_clamp_task(tmp_path / "src" / "v1")
    bump(v1.path, tmp_path / "src" / "v2", 2)
    lib = tmp_path / "lib"
    Registry(lib).add(find_tasks(tmp_path / "src"))
    r = cli("tasks", "check", "clamp-bug@1", "--library", str(lib), "--repeats", "1", "--json")
    assert r.returncode == 0, r.stderr
    (item,) = json.loads(r.stdout)["tasks"]
    t1 = Registry(lib).resolve("clamp-bug@1")
    assert item["ok"] and item["digest"] == t1.digest
    assert load_admission(t1) is not None and load_admission(Registry(lib).resolve("clamp-bug@2")) is None
    prefix = t1.digest.removeprefix("sha256:")[:12]
    r = cli("tasks", "check", prefix, "--library", str(lib), "--repeats", "1", "--json", "--no-store")
    assert r.returncode == 0 and json.loads(r.stdout)["tasks"][0]["digest"] == t1.digest, r.stderr
    before = snapshot(tmp_path)
    for ref in ("clamp-bug@7", "no-such-task", "sha256:" + "0" * 64, "./no/such/dir"):
        r = cli("tasks", "check", ref, "--library", str(lib))
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    r = cli("tasks", "check", "clamp-bug", "--library", str(tmp_path / "nolib"))
    assert r.returncode != 0 and "--library" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert snapshot(tmp_path) == before
