"""Task fixtures shared by tests, importable as `tests_support` (tests/ is on sys.path).

They live here, not in conftest.py: several directories have a conftest.py and
only one of them can be the module named `conftest` at a time.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from sparring.tasks.loader import Task, write_task
from sparring.tasks.spec import JudgeSpec, TaskSpec

T = TypeVar("T")
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str):  # type: ignore[no-untyped-def]
    """The script ``benchmarks/{name}.py`` as a module named ``name`` (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


BUGGY = '''\
def clamp(x, lo, hi):
    """Clamp x into [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return lo
    return x
'''
FIXED = BUGGY.replace("        return lo\n    return x", "        return hi\n    return x")
VISIBLE = """\
from mathx.core import clamp


def test_inside():
    assert clamp(5, 0, 10) == 5


def test_above():
    assert clamp(15, 0, 10) == 10
"""
HIDDEN = """\
from mathx.core import clamp


def test_inside():
    assert clamp(5, 0, 10) == 5


def test_below():
    assert clamp(-3, 0, 10) == 0


def test_above():
    assert clamp(15, 0, 10) == 10


def test_above_negative_range():
    assert clamp(0, -9, -2) == -2
"""
HIDDEN_IDS = [
    f"test_hidden_clamp.py::{n}"
    for n in ("test_inside", "test_below", "test_above", "test_above_negative_range")
]


def make_clamp_task(out: Path, task_id: str = "clamp-bug") -> Task:
    spec = TaskSpec(
        id=task_id,
        family="code-repair",
        instruction="The function clamp in mathx/core.py returns the wrong value for inputs above the range. "
        "Fix the bug without editing the tests.",
        success_criteria="All hidden tests of mathx.core.clamp pass.",
        judge=JudgeSpec(hidden_tests=HIDDEN_IDS),
    )
    return write_task(
        out,
        spec,
        workspace={"mathx/__init__.py": "", "mathx/core.py": BUGGY, "tests/test_core.py": VISIBLE},
        hidden={"test_hidden_clamp.py": HIDDEN},
        solution={"mathx/core.py": FIXED},
    )


FIXED_CLAMP = FIXED


# What copy mode (no root) lacks, as the README says: disk quota, OOM reports, an empty network
# namespace, snapshots of the change only. Root runs these tests (make test, CI); a run without
# root skips them and names why.
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="copy mode (no root) lacks this guarantee (README: Running without root)"
)


# Waiting in tests. CI shares its machine: a fixed sleep that is "long enough" on an idle machine is
# a race under load. Tests wait for the condition itself, with a deadline that only bounds a hang.
HANG_S = 120.0
"""How long a wait for something that should happen soon may take before the test calls it a hang."""


def wait_until(check: Callable[[], T], timeout_s: float = HANG_S, interval_s: float = 0.02) -> T:
    """Poll ``check`` until it returns something truthy (returned); on the deadline, its last value."""
    deadline = time.monotonic() + timeout_s
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(interval_s)
    return value


async def await_until(check: Callable[[], T], timeout_s: float = HANG_S, interval_s: float = 0.02) -> T:
    """:func:`wait_until` for coroutines: the event loop keeps running while it waits."""
    deadline = time.monotonic() + timeout_s
    while not (value := check()) and time.monotonic() < deadline:
        await asyncio.sleep(interval_s)
    return value


def procs_with(marker: str) -> list[int]:
    """Host pids whose argv, its words joined by spaces, contains ``marker`` (reads /proc/*/cmdline only).
    A process still inside execve reads as empty: wait for one to appear with :func:`wait_until`."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "cmdline").read_bytes().replace(b"\0", b" "):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def oracle_rollout(tasks_dir: Path, store: Path) -> dict:
    """``sparring rollout --policy oracle`` over ``tasks_dir``, as training runs it (the task's tools in the
    agent's sandbox, then the judge): its JSON summary, after asserting the command succeeded."""
    import json
    import subprocess
    import sys

    exe = Path(sys.executable).parent / "sparring"
    r = subprocess.run([str(exe), "rollout", "--tasks", str(tasks_dir), "--policy", "oracle", "--group-size", "1",
                        "--concurrency", "2", "--store", str(store), "--json"],
                       capture_output=True, text=True, timeout=600, env=os.environ.copy())  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)
