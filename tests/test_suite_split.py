"""`make test` runs a file's tests on one worker (xdist_units.py): checked with a real pytest-xdist run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from xdist_units import work_unit

HERE = Path(__file__).resolve().parent
RECORD = """import os, pathlib
def _mark(i):
    pathlib.Path(__file__).with_name(pathlib.Path(__file__).stem + f".{i}.worker").write_text(
        os.environ["PYTEST_XDIST_WORKER"])
"""


def _workers_per_file(tmp_path: Path, hook: bool) -> dict[str, set[str]]:
    """Run 3 files of 12 tests with 3 workers; which workers ran each file."""
    tmp_path.mkdir()
    names = ("test_a", "test_b", "test_c")
    for name in names:
        tests = "".join(f"def test_{i}():\n    _mark({i})\n" for i in range(12))
        (tmp_path / f"{name}.py").write_text(RECORD + tests)
    hook_line = "from xdist_units import pytest_xdist_make_scheduler  # noqa: F401\n"
    (tmp_path / "conftest.py").write_text(hook_line if hook else "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup",
         str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert all(len(list(tmp_path.glob(f"{n}.*.worker"))) == 12 for n in names)  # every test ran
    return {n: {p.read_text() for p in tmp_path.glob(f"{n}.*.worker")} for n in names}


def test_each_files_tests_run_on_one_worker(tmp_path):
    control = _workers_per_file(tmp_path / "without", hook=False)
    assert any(len(w) > 1 for w in control.values()), control  # without the hook a file's tests spread
    split = _workers_per_file(tmp_path / "with", hook=True)
    assert all(len(w) == 1 for w in split.values()), split  # with it, each file on a single worker


def test_the_shared_worker_groups_and_plain_files():
    assert work_unit("tests/distributed/test_executor.py::test_x[a]") == "ray"
    assert work_unit("tests/images/test_ray_node_images.py::test_y") == "ray"
    assert work_unit("tests/sandbox/test_bench.py::test_z") == "tests/sandbox/test_bench.py"
