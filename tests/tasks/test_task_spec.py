"""Task directories: loading errors, canonical digests, atomic writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparring.errors import TaskError
from sparring.tasks.digest import tree_digest
from sparring.tasks.loader import find_tasks, load_task


def test_load_roundtrip(clamp_task):
    t = load_task(clamp_task.path)
    assert t.spec == clamp_task.spec and t.digest == clamp_task.digest
    files, deleted = t.solution_files()
    assert list(files) == ["mathx/core.py"] and deleted == []


@pytest.mark.parametrize(
    "content,needle",
    [
        ("id = [oops\n", "malformed"),
        ('id = "x"\n', "family"),
        ('id = "bad id!"\nfamily = "f"\ninstruction = "i"\nsuccess_criteria = "s"\n', "id"),
        (
            'id = "x"\nfamily = "f"\ninstruction = "i"\nsuccess_criteria = "s"\nunknown_key = 1\n',
            "unknown_key",
        ),
        ('id = "x"\nfamily = "f"\ninstruction = "i"\nsuccess_criteria = "s"\ntools = ["bash"]\n', "submit"),
    ],
)
def test_malformed_specs_name_the_problem(tmp_path, content, needle):
    d = tmp_path / "t"
    (d / "workspace").mkdir(parents=True)
    (d / "task.toml").write_text(content)
    with pytest.raises(TaskError, match=needle):
        load_task(d)


def test_missing_dir_and_workspace(tmp_path):
    with pytest.raises(TaskError, match="not found"):
        load_task(tmp_path / "nope")
    with pytest.raises(TaskError, match="no task.toml"):
        load_task(tmp_path)
    with pytest.raises(TaskError, match="no tasks under"):
        find_tasks(tmp_path)


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(part=st.sampled_from(["workspace/mathx/core.py", "hidden/test_hidden_clamp.py", "solution/mathx/core.py", "task.toml"]),
       pos=st.integers(0, 200), byte=st.integers(0, 255))  # fmt: skip
def test_changing_any_byte_changes_the_digest(clamp_task, tmp_path_factory, part, pos, byte):
    d = _copy(clamp_task.path, tmp_path_factory.mktemp("t") / "t")
    f = d / part
    data = bytearray(f.read_bytes())
    pos %= len(data)
    if data[pos] == byte:
        byte = (byte + 1) % 256
    data[pos] = byte
    f.write_bytes(bytes(data))
    try:
        t = load_task(d)
    except TaskError:
        return  # a broken task.toml is rejected outright, which is also a change
    if part == "task.toml" and t.spec == clamp_task.spec:
        # The digest is of the parsed spec: an edit that means the same task (a comment over a line that
        # restates a default, ``# schema_version = 1``) is the same task.
        assert t.digest == clamp_task.digest
        return
    assert t.digest != clamp_task.digest


def test_digest_ignores_timestamps_and_location(clamp_task, tmp_path):
    import os

    d = _copy(clamp_task.path, tmp_path / "elsewhere")
    os.utime(d / "workspace" / "mathx" / "core.py", (0, 0))
    assert load_task(d).digest == clamp_task.digest
    assert tree_digest(d / "workspace") == tree_digest(clamp_task.workspace)


def test_executable_bit_is_part_of_the_digest(clamp_task, tmp_path):
    d = _copy(clamp_task.path, tmp_path / "x")
    (d / "workspace" / "mathx" / "core.py").chmod(0o755)
    assert load_task(d).digest != clamp_task.digest


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
_IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True)


@settings(max_examples=40, deadline=None)
@given(
    task_id=_IDS,
    version=st.integers(1, 10**6),
    instruction=_TEXT,
    success=_TEXT,
    difficulty=st.integers(0, 10),
    tags=st.lists(_TEXT, max_size=4),
    memory=st.integers(32, 1 << 16),
    files=st.dictionaries(
        st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?\.py", fullmatch=True), st.binary(max_size=64), max_size=4
    ),
)
def test_written_specs_load_back_identically_and_digests_are_stable(
    tmp_path_factory, task_id, version, instruction, success, difficulty, tags, memory, files
):
    from sparring.tasks.loader import write_task
    from sparring.tasks.spec import Limits, TaskSpec

    spec = TaskSpec(id=task_id, version=version, family="f", instruction=instruction, success_criteria=success,
                    difficulty=difficulty, tags=tags, limits=Limits(memory_mb=memory))  # fmt: skip
    files = {
        k: v
        for k, v in files.items()
        if not any(o != k and o.startswith(k.removesuffix(".py") + "/") for o in files)
    }
    root = tmp_path_factory.mktemp("h")
    a = write_task(root / "a", spec, dict(files), {}, {})
    b = write_task(root / "b", spec, dict(files), {}, {})
    assert a.spec == load_task(a.path).spec and a.spec.model_dump(
        exclude={"workspace_digest"}
    ) == spec.model_dump(exclude={"workspace_digest"})
    assert a.digest == b.digest == load_task(a.path).digest


@settings(max_examples=60, deadline=None)
@given(content=st.text(max_size=300))
def test_any_task_toml_either_loads_or_raises_task_error(tmp_path_factory, content):
    d = tmp_path_factory.mktemp("g")
    (d / "workspace").mkdir()
    (d / "task.toml").write_text(content)
    try:
        load_task(d)
    except TaskError as e:
        assert "\n" not in str(e).strip()
