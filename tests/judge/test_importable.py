"""Host-level: which diff files are importable without being text source, and that they are taken out."""

from __future__ import annotations

from pathlib import Path

import pytest
from native_payloads import build_extension, cache_tag, extension_suffix, unchecked_pyc

from sparring.judge.reward import ZEROING_FLAGS
from sparring.judge.static.hacks import static_flags
from sparring.judge.static.importable import classify, split_importable
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.spec import JudgeSpec, TaskSpec, canonical_dump


@pytest.fixture(scope="module")
def extension(tmp_path_factory) -> bytes:
    return build_extension(tmp_path_factory.mktemp("ext"), "core", "NATIVE = True\n")


@pytest.mark.parametrize(
    "rel",
    [
        "mathx/core.so",
        "mathx/core.abi3.so",
        "mathx/core.pyd",
        "libx.so.1",
        "mathx/__pycache__/core.cpython-311.pyc",
        "mathx/__pycache__/anything.txt",
        "mathx/core.pyc",
        "mathx/core.pyo",
        "deps.zip",
        "deps.egg",
        "deps-1.0-py3-none-any.whl",
        "app.pyz",
    ],
)
def test_native_code_bytecode_and_archives_by_name(rel):
    assert classify(rel, b"whatever") == "binary_module"


@pytest.mark.parametrize("rel", ["zz.pth", "sub/hook.pth", "sitecustomize.py", "usercustomize.so",
                                 "sitecustomize/__init__.py"])  # fmt: skip
def test_startup_hooks(rel):
    assert classify(rel, b"import os\n") == "startup_hook"


def test_content_is_read_too_so_renaming_does_not_help(extension):
    pyc = unchecked_pyc("X = 1\n", "m.py")
    assert classify("mathx/core.cpython-311-x86_64-linux-gnu.so", extension) == "binary_module"
    assert classify("data/blob.bin", extension) == "binary_module"  # an ELF under any name
    assert classify("data/blob.txt", pyc) == "binary_module"  # bytecode under any name
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("m.py", "X = 1\n")
    assert classify("data/payload.dat", b"junk in front" + buf.getvalue()) == "binary_module"


@pytest.mark.parametrize(
    "rel,data",
    [
        ("mathx/core.py", b"def f():\n    return 1\n"),
        ("out.txt", b"ab\r\ncd\r\n" * 4),  # CRLF text is not a pyc header
        ("data.csv", b"id,v\r\n1,2\r\n"),
        ("README.md", b"# notes\n"),
        ("run.sh", b"#!/bin/sh\necho hi\n"),
        ("empty", b""),
    ],
)
def test_text_and_data_pass(rel, data):
    assert classify(rel, data) is None


def test_split_removes_what_it_flags_and_keeps_the_rest(extension):
    sfx = extension_suffix()
    diff = WorkspaceDiff(
        files={
            "mathx/core.py": b"X = 1\n",
            f"mathx/core{sfx}": extension,
            f"mathx/__pycache__/core.{cache_tag()}.pyc": unchecked_pyc("X = 2\n", "core.py"),
            "lib/zz.pth": b"import os\n",
            "notes.txt": b"hello\n",
        },
        deleted=("old.py",),
    )
    kept, flags, removed = split_importable(diff)
    assert set(kept.files) == {"mathx/core.py", "notes.txt"} and kept.deleted == ("old.py",)
    assert flags == ["binary_module", "startup_hook"]
    assert removed == sorted(set(diff.files) - set(kept.files))
    assert set(flags) <= ZEROING_FLAGS
    # static_flags raises the same flags, so a judge that has not split yet still zeros the reward
    assert {"binary_module", "startup_hook"} <= set(static_flags(diff, Path("/nonexistent")))


def test_a_task_may_allow_binaries_by_glob(extension):
    rel = f"mathx/core{extension_suffix()}"
    diff = WorkspaceDiff(files={rel: extension})
    kept, flags, removed = split_importable(diff, ["mathx/*.so"])
    assert kept.files == diff.files and flags == [] and removed == []
    assert "binary_module" not in static_flags(diff, Path("/nonexistent"), allowed=["mathx/*.so"])
    assert split_importable(diff, ["other/*.so"])[1] == ["binary_module"]


def test_the_opt_in_does_not_change_digests_of_tasks_without_it():
    base = TaskSpec(id="t", family="f")
    assert "allow_binary_modules" not in canonical_dump(base)["judge"]
    opted = TaskSpec(id="t", family="f", judge=JudgeSpec(allow_binary_modules=["*.so"]))
    assert canonical_dump(opted)["judge"]["allow_binary_modules"] == ["*.so"]
    assert {
        k: v for k, v in base.model_dump(mode="json")["judge"].items() if k != "allow_binary_modules"
    } == (canonical_dump(base)["judge"])


def test_a_written_task_keeps_its_digest_and_its_opt_in(clamp_task, tmp_path):
    from sparring.tasks.loader import load_task, write_task

    assert "allow_binary_modules" not in (clamp_task.path / "task.toml").read_text()
    spec = clamp_task.spec.model_copy(
        update={"judge": clamp_task.spec.judge.model_copy(update={"allow_binary_modules": ["mathx/*.so"]})}
    )
    files = {p.relative_to(clamp_task.workspace).as_posix(): p.read_bytes()
             for p in clamp_task.workspace.rglob("*") if p.is_file()}  # fmt: skip
    hidden = {p.relative_to(clamp_task.hidden).as_posix(): p.read_bytes()
              for p in clamp_task.hidden.rglob("*") if p.is_file()}  # fmt: skip
    t = write_task(tmp_path / "opted", spec, files, hidden, {"mathx/core.py": b"x = 1\n"})
    assert load_task(t.path).spec.judge.allow_binary_modules == ["mathx/*.so"]
