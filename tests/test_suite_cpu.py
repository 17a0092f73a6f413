"""benchmarks/suite_cpu.py counts the CPU a test file costs, what runs in sandboxes included.

Real runs: a scratch test file whose subprocess burns CPU, and a real judgement in a real sandbox.
Other workers of a parallel run add to the machine's and the sandboxes' counts, never take from them,
so the checks are lower bounds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sparring.judge.pytest_judge import PytestJudge
from sparring.tasks.loader import solution_diff
from tests_support import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
suite_cpu = load_benchmark("suite_cpu")

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\n"


def test_a_files_cpu_counts_what_its_subprocesses_burn(tmp_path):
    test = tmp_path / "test_burn.py"
    test.write_text(
        f"import subprocess, sys\ndef test_burn():\n    subprocess.run([sys.executable, '-c', {BURN!r}], check=True)\n"
    )
    row = suite_cpu.measure(str(test), timeout=300)
    assert row.exit == 0 and row.cpu_s >= 0.5 and row.wall_s >= 0.5, row
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_no():\n    assert False\n")
    assert suite_cpu.measure(str(failing), timeout=300).exit == 1


def test_sandbox_cpu_grows_with_a_judgement_in_a_sandbox(backend, clamp_task):
    before = suite_cpu.sandbox_cpu_s()
    assert before is not None, "no sandbox cgroup here: make test runs as root, with cgroups"
    r = asyncio.run(PytestJudge(backend).score(clamp_task, solution_diff(clamp_task)))
    assert r.reward == 1.0, r
    after = suite_cpu.sandbox_cpu_s()
    assert after is not None and after - before > 0.05, (before, after)  # the launcher's interpreter alone


def test_the_heaviest_recorded_files_come_first(tmp_path):
    record = tmp_path / "r.json"
    record.write_text(
        '{"tests/test_readme.py": 500, "ray": 900, "tests/test_demo.py": 700, "tests/x_gone.py": 999}'
    )
    # a group name (ray) and a file that is gone are not files to run
    assert suite_cpu.heaviest(record, 5) == ["tests/test_demo.py", "tests/test_readme.py"]
    assert suite_cpu.heaviest(record, 1) == ["tests/test_demo.py"]
