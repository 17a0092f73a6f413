"""Which tasks a `sparring tasks` command means: paths, library refs, the library; broken tasks named."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparring.admission.check import unloadable
from sparring.errors import TaskError
from sparring.tasks.registry import Registry
from sparring.tasks.selection import library_tasks, load_each, resolve_refs, tasks_or_library
from tests_support import make_clamp_task


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sel")
    task = make_clamp_task(root / "tasks" / "clamp")
    reg = Registry(root / "lib")
    reg.add([task])
    return root, reg.root


def test_refs_resolve_to_paths_or_library_tasks(lib: tuple[Path, Path]) -> None:
    root, library = lib
    (p,) = resolve_refs([str(root / "tasks")], library)
    assert p == root / "tasks"
    (q,) = resolve_refs(["clamp-bug"], library)
    assert q == library / "clamp-bug" / "v1"
    with pytest.raises(TaskError, match="path not found: ./nope"):
        resolve_refs(["./nope"], library)
    with pytest.raises(TaskError, match="no task library at"):
        resolve_refs(["clamp-bug"], root / "no-library")


def test_no_paths_means_the_library(lib: tuple[Path, Path]) -> None:
    root, library = lib
    assert [t.id for t in tasks_or_library(None, library)] == ["clamp-bug"]
    assert [t.id for t in tasks_or_library([root / "tasks"], library)] == ["clamp-bug"]
    with pytest.raises(TaskError, match="does not exist .*tasks add"):
        library_tasks(root / "no-library")


def test_a_broken_task_is_named_and_the_rest_load(lib: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = lib
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "task.toml").write_text("id = [\n")
    tasks, bad = load_each([root / "tasks", broken])
    assert [t.id for t in tasks] == ["clamp-bug"]
    assert [d for d, _ in bad] == [broken]
    rep = unloadable(broken.name, bad[0][1]).to_json()
    assert list(rep) == ["id", "digest", "ok", "problems"]
    assert (rep["id"], rep["digest"], rep["ok"], rep["problems"][0]["rule"]) == (
        "broken",
        "",
        False,
        "spec_valid",
    )
    with pytest.raises(TaskError, match="path not found"):
        load_each([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="no tasks under"):
        load_each([tmp_path / "empty"])
