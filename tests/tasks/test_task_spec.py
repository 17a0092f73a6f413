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


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
