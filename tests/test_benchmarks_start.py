"""Every script in benchmarks/ starts: its imports resolve and it answers --help.

The benchmarks are where the speed and memory targets are measured, and no test runs them whole; a
moved module (store_bench imported `sparring.rollout.trajectory` after the trajectory record moved) or
a support module that gained an import (image_bench's `image_support` -> `tests_support`) broke them
silently. Each gets its own interpreter, as a user runs it, from the repository root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def test_there_are_benchmarks():
    assert len(SCRIPTS) >= 10, [p.name for p in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_benchmark_starts(script: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=env)  # fmt: skip
    assert r.returncode == 0, f"{script.name} does not start:\n{r.stderr[-2000:]}"
    assert "usage" in r.stdout.lower(), r.stdout[-500:]
