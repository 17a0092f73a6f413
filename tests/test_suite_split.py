"""`make test` runs a file's tests on one worker (xdist_units.py): checked with a real pytest-xdist run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from xdist_units import THREAD_VARS, heaviest_first, work_unit

HERE = Path(__file__).resolve().parent
# A scratch project's conftest: every hook of xdist_units.py, as tests/conftest.py imports them
HOOKS = (
    "from xdist_units import pytest_addoption, pytest_collection_modifyitems, pytest_configure, "
    "pytest_xdist_make_scheduler  # noqa: F401\n"
)
RECORD = """import os, pathlib
def _mark(i):
    pathlib.Path(__file__).with_name(pathlib.Path(__file__).stem + f".{i}.worker").write_text(
        os.environ["PYTEST_XDIST_WORKER"])
"""


# A scratch project's pytest: xdist only. The venv's other plugins (hypothesis, anyio, timeout) would be
# imported by each of the inner runs' processes (about a second each, ~18 of them), for tests that use none.
PYTEST = (sys.executable, "-m", "pytest", "-p", "xdist", "-p", "no:cacheprovider")


def _env() -> dict[str, str]:
    """This environment, with tests/ importable (xdist_units) by a scratch project's pytest run, and no
    plugin loaded that PYTEST does not name."""
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _workers_per_file(tmp_path: Path, hook: bool) -> dict[str, set[str]]:
    """Run 3 files of 12 tests with 3 workers; which workers ran each file."""
    tmp_path.mkdir()
    names = ("test_a", "test_b", "test_c")
    for name in names:
        tests = "".join(f"def test_{i}():\n    _mark({i})\n" for i in range(12))
        (tmp_path / f"{name}.py").write_text(RECORD + tests)
    hook_line = "from xdist_units import pytest_xdist_make_scheduler  # noqa: F401\n"
    (tmp_path / "conftest.py").write_text(hook_line if hook else "")
    env = _env()
    r = subprocess.run(
        [*PYTEST, "-q", "-n", "3", "--dist", "loadgroup",
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


def test_units_are_ordered_heaviest_first_and_stay_whole():
    ids = (
        [f"tests/a.py::t{i}" for i in range(3)] + ["tests/b.py::t0"] + [f"tests/c.py::t{i}" for i in range(2)]
    )
    ordered = heaviest_first(ids, {"tests/b.py": 400.0, "tests/a.py": 2.0})
    # b is known to be long; c (2 tests, unknown) is estimated at 2 s, a recorded at 2 s: collection order
    assert ordered == ["tests/b.py::t0"] + ids[:3] + ids[4:]
    assert sorted(ordered) == sorted(ids)


def test_a_recorded_run_orders_the_next_one(tmp_path):
    """One worker, three files: without a record the file with the most tests runs first (xdist's own
    order); a record naming the one-test file as the longest runs it first, and a run with
    --unit-durations-out writes such a record."""
    tmp_path.mkdir(exist_ok=True)
    stamp = "import time, pathlib\ndef _mark(n):\n    pathlib.Path(__file__).with_name(n + '.t').write_text(str(time.monotonic_ns()))\n"
    sizes = {"test_many": 6, "test_some": 3, "test_one": 1}
    for name, n in sizes.items():
        (tmp_path / f"{name}.py").write_text(
            stamp + "".join(f"def test_{i}():\n    _mark('{name}')\n" for i in range(n))
        )
    # test_one's one test has a subprocess spend 0.5 s of CPU: the record's CPU counts it
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\n"
    (tmp_path / "test_one.py").write_text(
        (tmp_path / "test_one.py").read_text()
        + f"    import subprocess, sys\n    subprocess.run([sys.executable, '-c', {burn!r}], check=True)\n"
    )
    (tmp_path / "conftest.py").write_text(HOOKS)

    def run(record: Path | None, out: Path) -> list[str]:
        env = _env()
        env["SPARRING_UNIT_DURATIONS"] = str(record or tmp_path / "none.json")
        r = subprocess.run(
            [*PYTEST, "-q", "-n", "1", "--dist", "loadgroup",
             "--unit-durations-out", str(out), str(tmp_path)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        first_done = {n: int((tmp_path / f"{n}.t").read_text()) for n in sizes}
        return sorted(sizes, key=first_done.get)  # by when each file last wrote: its order of running

    plain = run(None, tmp_path / "rec.json")
    assert plain == ["test_many", "test_some", "test_one"], plain  # the control: most tests first
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert set(rec) == {f"{n}.py" for n in sizes} and all(v >= 0 for v in rec.values()), rec
    cpu = json.loads((tmp_path / "rec.cpu.json").read_text())
    assert set(cpu) == set(rec) and cpu["test_one.py"] >= 0.5 > cpu["test_many.py"], cpu
    (tmp_path / "heavy.json").write_text(json.dumps({k: (500.0 if "test_one" in k else 1.0) for k in rec}))
    ordered = run(tmp_path / "heavy.json", tmp_path / "rec2.json")
    assert ordered[0] == "test_one", ordered


def test_each_worker_gets_its_share_of_the_cores():
    """share_cores: the cores over the workers (at least 1) in every thread variable not set already;
    nothing outside a worker."""
    import xdist_units

    cores = len(os.sched_getaffinity(0))
    env: dict[str, str] = {"PYTEST_XDIST_WORKER_COUNT": "3", "MKL_NUM_THREADS": "7"}
    assert xdist_units.share_cores(env) == max(1, cores // 3)
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == str(max(1, cores // 3))
    assert env["MKL_NUM_THREADS"] == "7"  # what the caller set stays
    assert xdist_units.share_cores(one := {"PYTEST_XDIST_WORKER_COUNT": "1"}) == cores and one[
        "OMP_NUM_THREADS"
    ] == str(cores)
    alone: dict[str, str] = {}
    assert xdist_units.share_cores(alone) is None and alone == {}


def test_torch_on_a_worker_and_in_its_subprocesses_uses_the_workers_share(tmp_path):
    """The suite's own conftest line under a real 2-worker run: torch, imported by a test and by a
    subprocess it starts, runs the worker's share of the cores; without workers nothing is set."""
    cores = len(os.sched_getaffinity(0))
    (tmp_path / "conftest.py").write_text("import xdist_units\nxdist_units.share_cores()\n")
    probe = "import torch; print(torch.get_num_threads())"
    (tmp_path / "test_threads.py").write_text(
        "import os, subprocess, sys, pathlib\n"
        "def test_threads():\n"
        "    import torch\n"
        f"    sub = subprocess.run([sys.executable, '-c', {probe!r}], capture_output=True, text=True).stdout\n"
        "    seen = f\"{torch.get_num_threads()} {sub.strip()} {os.environ.get('OMP_NUM_THREADS')}\"\n"
        "    pathlib.Path(__file__).with_name('threads.txt').write_text(seen)\n"
    )
    env = _env()
    for var in (*THREAD_VARS, "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_WORKER"):
        env.pop(var, None)  # this test may itself run on a worker: the inner runs must not inherit it
    share = max(1, cores // 2)
    for workers, want in ((["-n", "2"], f"{share} {share} {share}"), ([], None)):
        r = subprocess.run([*PYTEST, "-q", *workers, str(tmp_path)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        seen = (tmp_path / "threads.txt").read_text()
        if want:
            assert seen == want
        else:  # control: one process without workers sets nothing (torch picks its own)
            assert seen.endswith(" None"), seen


def test_make_tests_pytest_line_runs_again_where_its_record_exists(tmp_path):
    """`make test`'s own pytest arguments, run twice in one tree. The first run writes the record; in the
    second its path exists, and ``--unit-durations-out PATH`` (a space, not ``=``) let pytest's first pass,
    which does not know the option yet, take PATH for a test path: it looked for conftests there, never
    loaded tests/conftest.py (which adds the option) and failed, "unrecognized arguments" (exit 4)."""
    make = subprocess.run(["make", "-n", "test"], cwd=HERE.parent, capture_output=True, text=True, timeout=60)
    line = next(x for x in make.stdout.splitlines() if "bin/pytest" in x and "--unit-durations-out" in x)
    args = shlex.split(line)[1:]
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(HOOKS)
    (tmp_path / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    env = _env()
    record = tmp_path / ".sparring" / "unit-durations.json"
    for run in (1, 2):
        r = subprocess.run([*PYTEST, *args], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert r.returncode == 0, (run, r.stdout[-2000:] + r.stderr[-2000:])
        assert json.loads(record.read_text()) == {"tests/test_one.py": pytest.approx(0, abs=5)}
