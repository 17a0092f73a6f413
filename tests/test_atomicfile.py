"""atomicfile: a file replaced whole, with the mode a user expects, and nothing left when a write fails;
and the commands whose files go through it keep a file's mode (`tasks pin` made task.toml 0600)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparring import atomicfile

EXE = Path(sys.executable).parent / "sparring"


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _umask_mode(tmp_path: Path, umask: int) -> int:
    """The mode write_text gives a new file in a process whose umask is ``umask`` (its own process: the
    umask is the whole process's, and this one's threads must not see it change)."""
    f = tmp_path / f"new-{umask:o}"
    code = f"import os; os.umask({umask}); from sparring import atomicfile; atomicfile.write_text({str(f)!r}, 'x')"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    return _mode(f)


def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path):
    # mkstemp's 0600 was what every hand-written atomic write gave a new file, whatever the umask
    assert _umask_mode(tmp_path, 0o022) == 0o644
    assert _umask_mode(tmp_path, 0o027) == 0o640
    assert _umask_mode(tmp_path, 0o077) == 0o600


def test_a_replaced_file_keeps_its_mode_and_an_exact_mode_is_exact(tmp_path):
    f = tmp_path / "f"
    f.write_text("old")
    for m in (0o640, 0o444, 0o755):
        os.chmod(f, m)
        atomicfile.write_text(f, f"new {m:o}")
        assert f.read_text() == f"new {m:o}" and _mode(f) == m
    os.chmod(f, 0o4755)  # set-user-ID: not carried over to bytes it was never set for
    atomicfile.write_text(f, "new")
    assert _mode(f) == 0o755
    atomicfile.write_bytes(f, b"private", mode=0o600)
    assert _mode(f) == 0o600 and f.read_bytes() == b"private"
    # an exact mode is given after the write, whatever the umask would have made of it
    code = f"import os; os.umask(0o077); from sparring import atomicfile; atomicfile.write_text({str(tmp_path / 'x')!r}, 'x', mode=0o755)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert _mode(tmp_path / "x") == 0o755


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    f = tmp_path / "f"
    f.write_text("old")
    with pytest.raises(RuntimeError, match="half"), atomicfile.replacing(f) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("half written")
    assert f.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    # a rename that fails (the destination is a non-empty folder) takes its temporary file with it
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("x")
    with pytest.raises(OSError):
        atomicfile.write_text(tmp_path / "d", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f"]
    # no folder: nothing made at all
    with pytest.raises(FileNotFoundError):
        atomicfile.write_text(tmp_path / "missing" / "f", "x")


def test_writers_at_once_each_land_whole(tmp_path):
    f = tmp_path / "f"
    texts = [str(i) * (1000 + i) for i in range(16)]
    start = threading.Barrier(len(texts))

    def write(t: str) -> None:
        start.wait()
        for _ in range(20):
            atomicfile.write_text(f, t)

    threads = [threading.Thread(target=write, args=(t,)) for t in texts]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert f.read_text() in texts and [p.name for p in tmp_path.iterdir()] == ["f"]


@given(st.binary(max_size=4096))
def test_what_is_written_is_what_is_read(tmp_path_factory, data):
    f = tmp_path_factory.mktemp("round") / "f"
    atomicfile.write_bytes(f, data)
    assert f.read_bytes() == data


def test_a_temporary_folder_is_made_as_mkdir_makes_one(tmp_path):
    code = (f"import os; os.umask(0o027); from sparring import atomicfile; "
            f"print(atomicfile.temp_dir({str(tmp_path / 'lib')!r}))")  # fmt: skip
    made = Path(subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True,
                               text=True).stdout.strip())  # fmt: skip
    assert made.parent == tmp_path and made.name.startswith(".lib.") and _mode(made) == 0o750
    others = {atomicfile.temp_dir(tmp_path / "lib") for _ in range(20)}
    assert len(others) == 20 and made not in others and all(p.is_dir() for p in others)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI under umask 022 (set in its own shell: this process's umask stays as it is)."""
    cmd = ["sh", "-c", 'umask 022; exec "$0" "$@"', str(EXE), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_pin_and_check_keep_the_task_files_modes(tmp_path):
    """`tasks pin` replaced task.toml through mkstemp (0600 whatever it was); `tasks check` wrote
    admission.json 0600. Each now keeps the file's mode, or gives a new one the umask's (022 here)."""
    r = _cli("tasks", "new", "t", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    task = tmp_path / "t"
    toml = task / "task.toml"
    os.chmod(toml, 0o664)  # a group-shared task library
    src = next(p for p in sorted((task / "workspace").rglob("*.py")) if p.is_file())
    src.write_text(src.read_text() + "# edited\n")
    r = _cli("tasks", "pin", "t", cwd=tmp_path)
    assert r.returncode == 0 and "pinned" in r.stdout + r.stderr, r.stderr
    assert _mode(toml) == 0o664
    r = _cli("tasks", "check", "t", "--json", cwd=tmp_path)
    record = task / "admission.json"
    assert record.is_file(), r.stderr
    assert _mode(record) == 0o644 and json.loads(record.read_text())["digest"]
    assert not [p for p in task.iterdir() if p.name.endswith(".tmp")]


def test_generated_and_imported_task_folders_get_the_umasks_mode(tmp_path):
    """A task folder was built in mkdtemp's 0700 folder and renamed into place: every generated,
    imported or library task was 0700, closed to a group that shares the library."""
    r = _cli("tasks", "generate", "code-repair", "--n", "1", "--seed", "1", "--out", "gen", "--no-check",
             cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (task,) = (tmp_path / "gen").iterdir()
    assert _mode(task) == 0o755 and _mode(task / "workspace") == 0o755
    # copied into a library as a version (in this process: its umask is left as the test runner set it)
    from sparring.tasks.loader import load_task
    from sparring.tasks.registry import INDEX, Registry

    umask = int(next(ln.split()[1] for ln in Path("/proc/self/status").read_text().splitlines()
                     if ln.startswith("Umask:")), 8)  # fmt: skip
    lib = Registry(tmp_path / "lib")
    (added,), _ = lib.add([load_task(task)])
    assert _mode(added.path) == 0o777 & ~umask and _mode(tmp_path / "lib" / INDEX) == 0o666 & ~umask
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text(json.dumps({"task_id": "add", "prompt": 'def add(a, b):\n    """Return a + b."""\n',
                                 "canonical_solution": "    return a + b\n", "entry_point": "add",
                                 "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"}) + "\n")  # fmt: skip
    r = _cli("tasks", "import", "--format", "function-jsonl", str(jsonl), "--out", "imported", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _mode(tmp_path / "imported") == 0o755
    assert all(_mode(p) == 0o755 for p in (tmp_path / "imported").iterdir()), list(
        (tmp_path / "imported").iterdir()
    )
