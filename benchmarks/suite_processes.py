"""Where a whole run's CPU went, process by process: a Linux process-accounting file summed by command,
by who started each process, and by how much CPU each took; one JSON object.

`make test`'s record (``.sparring/unit-durations.cpu.json``) sees the workers and their waited-for
subprocesses, and ``suite_cpu.py`` runs files one at a time; neither says which *processes* the suite's
CPU goes to when it runs whole. The kernel's process accounting does: one record per process that
exits, with its command name (``comm``), parent, start time and user and system CPU. Every process of
the machine counts, the sandboxes' included; a process still running when accounting stops is not in
the file. Turn it on around the run (root; Debian's ``acct`` package has ``accton``)::

    accton /tmp/pacct; make test; accton off
    python benchmarks/suite_processes.py /tmp/pacct [--top 25] [--drop-pid PID ...]

``in_sandboxes`` counts the processes with a sandbox's exec server (``execserver``) or ``bwrap`` among
their ancestors; ``interpreters_in_sandboxes`` the Python interpreters an exec server started itself
(the judge's launchers and the commands an agent runs). ``--drop-pid`` leaves out a process and its
descendants (a load generator run beside the suite, say).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (a float,
# in clock ticks), then eight comp_t (utime, stime, mem, io, rw, minflt, majflt, swaps) and comm[16]
V3 = struct.Struct("<BBHIIIIIIf8H16s")
TICKS = 100  # AHZ: comp_t times and etime are in these
SANDBOX_PARENTS = frozenset({"execserver", "bwrap"})
BANDS = (0.05, 0.15, 0.3, 0.6, 1.2, 2.5, 5.0, 20.0)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: float  # seconds since the epoch
    elapsed: float  # seconds
    user: float  # CPU seconds
    system: float
    command: str

    @property
    def cpu(self) -> float:
        return self.user + self.system


def comp_t(v: int) -> int:
    """A comp_t's value: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (v & 0x1FFF) << (3 * (v >> 13))


def read(data: bytes) -> list[Proc]:
    """The records of an acct v3 file; ValueError naming what is wrong with anything else."""
    if len(data) % V3.size:
        raise ValueError(f"{len(data)} bytes is not a whole number of {V3.size}-byte acct v3 records")
    out = []
    for off in range(0, len(data), V3.size):
        f = V3.unpack_from(data, off)
        if f[1] & 0x0F != 3:
            raise ValueError(
                f"record {off // V3.size} is acct version {f[1] & 0x0F}, not 3 (Linux's acct_v3)"
            )
        ut, st, comm = comp_t(f[10]), comp_t(f[11]), f[18]
        out.append(Proc(pid=f[6], ppid=f[7], start=float(f[8]), elapsed=f[9] / TICKS, user=ut / TICKS,
                        system=st / TICKS, command=comm.split(b"\0", 1)[0].decode("utf-8", "replace")))  # fmt: skip
    return out


def parents(procs: list[Proc]) -> dict[int, Proc | None]:
    """Each process's parent among the records (index -> parent): the process of its parent's pid that
    was alive when it started (a pid is used again over a long run); None for a parent not recorded."""
    by_pid: dict[int, list[Proc]] = defaultdict(list)
    for p in procs:
        by_pid[p.pid].append(p)
    out: dict[int, Proc | None] = {}
    for i, p in enumerate(procs):
        alive = [
            q for q in by_pid.get(p.ppid, []) if q.start <= p.start + 1 and p.start <= q.start + q.elapsed + 1
        ]
        out[i] = min(alive, key=lambda q: abs(q.start - p.start)) if alive else None
    return out


def summary(procs: list[Proc], top: int = 25, drop: frozenset[int] = frozenset()) -> dict:
    """The JSON this script prints."""
    parent = parents(procs)
    index = {id(p): i for i, p in enumerate(procs)}

    def ancestors(i: int) -> list[Proc]:
        chain, seen = [], set()
        q = parent[i]
        while q is not None and id(q) not in seen:
            seen.add(id(q))
            chain.append(q)
            q = parent[index[id(q)]]
        return chain

    kept, chains = [], []
    for i, p in enumerate(procs):
        chain = ancestors(i)
        if p.pid in drop or any(a.pid in drop for a in chain):
            continue
        kept.append(p)
        chains.append(chain)
    total = sum(p.cpu for p in kept)
    by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for p in kept:
        row = by[p.command]
        row[0] += 1
        row[1] += p.cpu
        row[2] += p.system
    commands = [{"command": c, "processes": int(n), "cpu_s": round(cpu, 1), "system_s": round(sy, 1),
                 "ms_each": round(1000 * cpu / n, 1)}
                for c, (n, cpu, sy) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]]  # fmt: skip
    sandboxed = [
        p for p, chain in zip(kept, chains, strict=True) if any(a.command in SANDBOX_PARENTS for a in chain)
    ]
    interpreters = [p for p, chain in zip(kept, chains, strict=True)
                    if p.command.startswith("python") and chain and chain[0].command == "execserver"]  # fmt: skip
    bands = []
    for lo, hi in zip((0.0, *BANDS), (*BANDS, float("inf")), strict=True):
        sel = [p for p in kept if lo <= p.cpu < hi]
        bands.append({"cpu_from_s": lo, "cpu_to_s": None if hi == float("inf") else hi, "processes": len(sel),
                      "cpu_s": round(sum(p.cpu for p in sel), 1)})  # fmt: skip

    def part(ps: list[Proc]) -> dict:
        cpu = sum(p.cpu for p in ps)
        return {"processes": len(ps), "cpu_s": round(cpu, 1), "share": round(cpu / total, 3) if total else 0.0,
                "ms_each": round(1000 * cpu / len(ps), 1) if ps else None}  # fmt: skip

    return {"processes": len(kept), "cpu_s": round(total, 1), "system_s": round(sum(p.system for p in kept), 1),
            "in_sandboxes": part(sandboxed), "interpreters_in_sandboxes": part(interpreters),
            "by_command": commands, "by_cpu": bands}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path, help="a process-accounting file (accton FILE ... accton off)")
    ap.add_argument("--top", type=int, default=25, help="commands to list, most CPU first")
    ap.add_argument(
        "--drop-pid", type=int, action="append", default=[], help="leave out this process and its descendants"
    )
    a = ap.parse_args(argv)
    try:
        procs = read(a.file.read_bytes())
    except (OSError, ValueError) as e:
        print(
            f"suite_processes: cannot read {a.file}: {e}; give the file `accton FILE` wrote", file=sys.stderr
        )
        return 2
    print(json.dumps(summary(procs, a.top, frozenset(a.drop_pid)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
