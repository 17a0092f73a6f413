"""Where the suite's CPU goes: each test file run alone, its wall seconds, the CPU the whole machine spent
meanwhile and the part of it that ran inside sandboxes; one JSON object per file, then a total.

The suite is bound by the CPU (docs/installation.md), and `make test`'s own record
(``.sparring/unit-durations.cpu.json``) sees only the workers' CPU and their waited-for subprocesses':
not what runs in a sandbox (its own cgroup, under ``sparring``), nor Ray's daemons. This counts both:
the machine's CPU from /proc/stat, the sandboxes' from their parent cgroup. Run it on an otherwise idle
machine (everything running counts). Each file runs in one pytest process with one math-library thread,
as on a `make test` worker of a 2-core machine.

python benchmarks/suite_cpu.py [FILE ...] [--top N] [--record tests/unit_durations.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from sparring.sandbox.isolation.cgroups import CGROUP_ROOT, PARENT, _keyed

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # xdist_units: the variables a `make test` worker sets

from xdist_units import THREAD_VARS  # noqa: E402

ONE_THREAD = dict.fromkeys(THREAD_VARS, "1")


def machine_cpu_s() -> float:
    """CPU seconds the machine has spent, all cores (user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(fields[i]) for i in (0, 1, 2, 5, 6, 7) if i < len(fields))
    return busy / os.sysconf("SC_CLK_TCK")


def sandbox_cpu_s(root: Path = CGROUP_ROOT) -> float | None:
    """CPU seconds spent in sandboxes' cgroups so far (their parent's count), or None where there is none."""
    v1 = root / "cpuacct" / PARENT / "cpuacct.usage"
    if v1.is_file():
        return int(v1.read_text()) / 1e9
    v2 = root / PARENT / "cpu.stat"
    usec = _keyed(v2).get("usage_usec") if v2.is_file() else None
    return None if usec is None else usec / 1e6


def is_test_file(unit: str) -> bool:
    """Whether ``unit`` (a file, a node id, or a record's group name such as ``ray``) names a file here."""
    return (ROOT / unit.split("::")[0]).exists()


def heaviest(record: Path, top: int) -> list[str]:
    """The ``top`` longest files of a recorded run (its work units that are files)."""
    seconds = json.loads(record.read_text())
    return [u for u in sorted(seconds, key=seconds.get, reverse=True) if is_test_file(u)][:top]


@dataclass(frozen=True)
class Row:
    unit: str
    exit: int | None  # None: it ran past --timeout
    wall_s: float
    cpu_s: float
    sandbox_cpu_s: float | None


def measure(unit: str, timeout: float) -> Row:
    """Run ``unit`` alone; its seconds, the machine's CPU meanwhile and the sandboxes' part of it."""
    env = {**os.environ, **ONE_THREAD}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", unit]
    m0, s0, t0 = machine_cpu_s(), sandbox_cpu_s(), time.monotonic()
    try:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = None
    wall, m1, s1 = time.monotonic() - t0, machine_cpu_s(), sandbox_cpu_s()
    sandbox = None if s0 is None or s1 is None else round(s1 - s0, 1)
    return Row(unit, rc, round(wall, 1), round(m1 - m0, 1), sandbox)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("units", nargs="*", help="test files (default: the --top longest of --record)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--record", type=Path, default=ROOT / "tests" / "unit_durations.json")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one file may take")
    a = ap.parse_args(argv)
    units = a.units or heaviest(a.record, a.top)
    missing = [u for u in units if not is_test_file(u)]
    if missing:
        print(f"suite_cpu: no such test file: {missing[0]} (paths are relative to {ROOT})", file=sys.stderr)
        return 2
    rows: list[Row] = []
    for unit in units:
        rows.append(measure(unit, a.timeout))
        print(json.dumps(asdict(rows[-1])), flush=True)
    sandbox = [r.sandbox_cpu_s for r in rows if r.sandbox_cpu_s is not None]
    failed = [r.unit for r in rows if r.exit != 0]
    print(json.dumps({"units": len(rows), "wall_s": round(sum(r.wall_s for r in rows), 1),
                      "cpu_s": round(sum(r.cpu_s for r in rows), 1),
                      "sandbox_cpu_s": round(sum(sandbox), 1) if sandbox else None, "failed": failed}))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
