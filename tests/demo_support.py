"""One `sparring demo --quick` and one `--no-rl` control per test session, shared by every test that needs one.

The README's two demo commands, tests/test_demo.py and the report-page tests all read a quick demo's
output, and each run costs a minute or more of both CPU cores. The session runs each once, with the
README's own arguments, from one directory the way the README's commands leave it (``.sparring/demo``
and ``.sparring/control``). A test that writes into a run copies it first (:func:`copy_run`), so what
one test leaves never changes what another reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparring import atomicfile
from sparring.filelock import beside, locked

EXE = Path(sys.executable).parent / "sparring"
# Exactly the README's arguments (tests/test_readme.py runs every other README command itself and
# takes these two from here: it matches a command's arguments against these tuples).
DEMO_ARGS = ("demo", "--quick", "--json")
CONTROL_ARGS = ("demo", "--quick", "--seed", "0", "--no-rl", "--json", "--workdir", ".sparring/control")


SQLITE_SIDE_FILES = shutil.ignore_patterns("*.db-wal", "*.db-shm", "*.db-journal")
"""Left out of a copy of a finished run: a finished writer has checkpointed its WAL into the database,
and a reader elsewhere (another worker's test) creates and removes these as it opens and closes it."""


@dataclass(frozen=True)
class DemoRun:
    """A finished demo: the directory it ran from, its workdir, its JSON (stdout) and its stderr."""

    root: Path
    workdir: Path
    out: dict
    stderr: str


def _run(root: Path, args: tuple[str, ...], workdir: str) -> DemoRun:
    """The run of ``args`` from ``root``, made once for the whole session: under pytest-xdist the first
    worker that needs it runs it (one run at a time, under a lock in ``root``) and records its answer
    next to it; the others wait for that lock and read the answer."""
    answer = root / f"{Path(workdir).name}.answer.json"
    with locked(beside(root / "runs")):
        if not answer.is_file():
            r = subprocess.run([str(EXE), *args], cwd=root, capture_output=True, text=True, timeout=1800)
            assert r.returncode == 0, f"`sparring {' '.join(args)}` failed:\n{r.stderr[-3000:]}"
            atomicfile.write_text(answer, json.dumps({"out": json.loads(r.stdout), "stderr": r.stderr}))
    got = json.loads(answer.read_text())
    return DemoRun(root, root / workdir, got["out"], got["stderr"])


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory) -> Path:
    """The directory both shared runs start from (the README's working directory): one per session,
    shared by the xdist workers (their base temps' common parent)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp("demo-runs")
    shared = tmp_path_factory.getbasetemp().parent / "demo-runs"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def demo_quick(demo_root: Path) -> DemoRun:
    return _run(demo_root, DEMO_ARGS, ".sparring/demo")


@pytest.fixture(scope="session")
def demo_control(demo_root: Path) -> DemoRun:
    return _run(demo_root, CONTROL_ARGS, ".sparring/control")


def copy_run(run: DemoRun, dest: Path) -> Path:
    """A private copy of ``run``'s workdir at ``dest`` (the shared one stays as the demo left it)."""
    shutil.copytree(run.workdir, dest, symlinks=True, ignore=SQLITE_SIDE_FILES)
    return dest
