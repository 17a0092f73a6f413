"""benchmarks/suite_processes.py sums a process-accounting file by command, by sandbox and by CPU.

The records are written here with struct, in the kernel's acct_v3 layout: a fake of the kernel's file,
named so. Turning real accounting on in a test would take the machine's one accounting file from
whoever has it (the run being measured, say), so the format is checked against the layout instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests_support import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
sp = load_benchmark("suite_processes")

T0 = 1_800_000_000


def encode_comp_t(v: int) -> int:
    """The kernel's encode_comp_t: shift right 3 bits at a time (rounding) until 13 bits hold it."""
    exp, rnd = 0, 0
    while v > 0x1FFF:
        rnd = v & 4
        v >>= 3
        exp += 1
    if rnd and v + 1 > 0x1FFF:
        v >>= 3
        exp += 1
    return (exp << 13) + v


def record(pid: int, ppid: int, comm: str, cpu_ticks: int, sys_ticks: int = 0, start: int = T0, etime: float = 100.0) -> bytes:  # fmt: skip
    comps = [encode_comp_t(cpu_ticks - sys_ticks), encode_comp_t(sys_ticks), 0, 0, 0, 0, 0, 0]
    return sp.V3.pack(0, 3, 0, 0, 0, 0, pid, ppid, start, etime * sp.TICKS, *comps, comm.encode()[:16])


def test_the_layout_is_the_kernels():
    assert sp.V3.size == 64  # sizeof(struct acct_v3)


@given(st.integers(min_value=0, max_value=2**30))
def test_comp_t_decodes_what_the_kernel_encodes(v):
    got = sp.comp_t(encode_comp_t(v))
    assert abs(got - v) <= max(1, v >> 10)  # 13 bits of mantissa: a relative error under 1/1024


def test_a_run_is_summed_by_command_by_sandbox_and_by_cpu(tmp_path):
    recs = [
        record(10, 1, "pytest", 5000, 500, etime=6000.0),  # a worker: 50 CPU-s
        record(11, 10, "bwrap", 1, etime=3000.0),
        record(12, 11, "execserver", 2, 2, etime=3000.0),
        record(13, 12, "python", 20),  # a judge launcher: 0.2 CPU-s
        record(14, 12, "python", 22),
        record(15, 13, "sh", 1),  # started by the launcher: in a sandbox, not an exec server's interpreter
        record(16, 10, "python", 300),  # a CLI the worker ran: outside
        record(20, 1, "sh", 90000, etime=9000.0),  # a load generator beside the run
        record(21, 20, "sh", 50),
    ]
    f = tmp_path / "pacct"
    f.write_bytes(b"".join(recs))
    d = sp.summary(sp.read(f.read_bytes()), drop=frozenset({20}))
    assert d["processes"] == 7 and d["cpu_s"] == pytest.approx(53.46, abs=0.051)  # rounded to 0.1 s
    assert d["in_sandboxes"]["processes"] == 4 and d["in_sandboxes"]["cpu_s"] == pytest.approx(
        0.45, abs=0.051
    )
    assert d["interpreters_in_sandboxes"] == {"processes": 2, "cpu_s": 0.4, "share": 0.008, "ms_each": 210.0}
    assert [r["command"] for r in d["by_command"]][:2] == ["pytest", "python"]
    assert d["by_command"][1] == {
        "command": "python",
        "processes": 3,
        "cpu_s": 3.4,
        "system_s": 0.0,
        "ms_each": 1140.0,
    }
    assert sum(b["processes"] for b in d["by_cpu"]) == 7 and d["by_cpu"][-1]["cpu_to_s"] is None
    # the same file through the command line, as the docs run it; nothing dropped: the load counts
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite_processes.py"), str(f)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["processes"] == 9


def test_a_pid_used_again_finds_the_parent_alive_when_it_started():
    recs = [
        record(30, 1, "old", 1, start=T0, etime=10.0),
        record(31, 30, "child-of-old", 1, start=T0 + 5, etime=1.0),
        record(30, 1, "new", 1, start=T0 + 100, etime=10.0),
        record(32, 30, "child-of-new", 1, start=T0 + 105, etime=1.0),
        record(33, 99, "orphan", 1, start=T0 + 105, etime=1.0),
    ]
    procs = sp.read(b"".join(recs))
    par = sp.parents(procs)
    assert par[1] is not None and par[1].command == "old"
    assert par[3] is not None and par[3].command == "new"
    assert par[4] is None


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"\0" * 63, "not a whole number"), (record(1, 0, "x", 1).replace(b"\x03", b"\x02", 1), "version 2")],
)
def test_a_file_that_is_not_acct_v3_is_refused_in_one_line(tmp_path, data, why):
    f = tmp_path / "bad"
    f.write_bytes(data)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite_processes.py"), str(f)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stdout == ""
