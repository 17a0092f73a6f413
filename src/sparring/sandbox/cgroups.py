"""Per-sandbox cgroups for memory, pids and CPU, on cgroup v2 or v1 hierarchies.

A :class:`CgroupSet` is one group per controller (v1) or one group (v2) named
``sparring/<sandbox id>``. The sandbox's processes join it before they exec,
so nothing escapes the limit (see ``procs_files``); OOM kills are counted so an exec can report
``oom_killed``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparring.errors import SandboxUnavailableError

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "sparring"


def _is_v2(root: Path) -> bool:
    return (root / "cgroup.controllers").is_file()


def _write(p: Path, value: str) -> None:
    p.write_text(value)


@dataclass
class CgroupSet:
    """The cgroup directories of one sandbox; ``dirs`` maps controller -> directory."""

    name: str
    dirs: dict[str, Path] = field(default_factory=dict)
    v2: bool = False

    @classmethod
    def create(
        cls,
        name: str,
        memory_mb: int | None,
        pids: int | None,
        cpus: float | None,
        root: Path = CGROUP_ROOT,
    ) -> CgroupSet:
        if memory_mb is None and pids is None and cpus is None:
            return cls(name)
        try:
            if _is_v2(root):
                return cls._create_v2(name, memory_mb, pids, cpus, root)
            return cls._create_v1(name, memory_mb, pids, cpus, root)
        except OSError as e:
            raise SandboxUnavailableError(
                f"cannot set memory/pids/cpu limits: cgroup hierarchy at {root} is not writable ({e.strerror}); "
                "run as root or drop the limit options"
            ) from None

    @classmethod
    def _create_v2(cls, name: str, memory_mb: int | None, pids: int | None, cpus: float | None, root: Path) -> CgroupSet:
        parent = root / PARENT
        parent.mkdir(exist_ok=True)
        wanted = {"memory": memory_mb, "pids": pids, "cpu": cpus}
        enable = " ".join(f"+{c}" for c, v in wanted.items() if v is not None)
        _write(root / "cgroup.subtree_control", enable)
        _write(parent / "cgroup.subtree_control", enable)
        d = parent / name
        d.mkdir()
        cg = cls(name, {"unified": d}, v2=True)
        if memory_mb is not None:
            _write(d / "memory.max", str(memory_mb * 1024 * 1024))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
        if pids is not None:
            _write(d / "pids.max", str(pids))
        if cpus is not None:
            _write(d / "cpu.max", f"{int(cpus * 100_000)} 100000")
        return cg

    @classmethod
    def _create_v1(cls, name: str, memory_mb: int | None, pids: int | None, cpus: float | None, root: Path) -> CgroupSet:
        cg = cls(name)
        for ctrl, value in (("memory", memory_mb), ("pids", pids), ("cpu", cpus)):
            if value is None:
                continue
            base = root / ctrl
            if not base.is_dir():
                raise SandboxUnavailableError(f"cgroup v1 controller '{ctrl}' is not mounted at {base}")
            d = base / PARENT / name
            d.mkdir(parents=True)
            cg.dirs[ctrl] = d
            if ctrl == "memory":
                limit = str(int(value) * 1024 * 1024)
                _write(d / "memory.limit_in_bytes", limit)
                if (d / "memory.memsw.limit_in_bytes").exists():
                    _write(d / "memory.memsw.limit_in_bytes", limit)
            elif ctrl == "pids":
                _write(d / "pids.max", str(int(value)))
            else:
                _write(d / "cpu.cfs_period_us", "100000")
                _write(d / "cpu.cfs_quota_us", str(int(float(value) * 100_000)))
        return cg

    def procs_files(self) -> list[Path]:
        """The ``cgroup.procs`` file of every group: a process joins by writing its pid there."""
        return [d / "cgroup.procs" for d in self.dirs.values()]

    def oom_kills(self) -> int:
        """OOM kills so far in this group (0 when there is no memory limit)."""
        if self.v2:
            events = self.dirs["unified"] / "memory.events"
            key = "oom_kill"
        elif "memory" in self.dirs:
            events = self.dirs["memory"] / "memory.oom_control"
            key = "oom_kill"
        else:
            return 0
        try:
            for line in events.read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
        except OSError:
            pass
        return 0

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return sorted(out)

    def destroy(self) -> None:
        """Kill whatever is left in the groups and remove them."""
        import signal

        for _ in range(50):
            left = self.pids()
            if not left:
                break
            for p in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.01)
        for d in self.dirs.values():
            try:
                d.rmdir()
            except OSError:
                shutil.rmtree(d, ignore_errors=True)
        self.dirs.clear()
