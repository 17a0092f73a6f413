"""Per-sandbox cgroups for memory, pids and CPU, on cgroup v2 or v1 hierarchies.

A :class:`CgroupSet` is one group per controller (v1) or one group (v2) named
``sparring/<sandbox id>``. The sandbox's processes join it before they exec,
so nothing escapes the limit (see ``procs_files``); OOM kills are counted so an exec can report
``oom_killed``, and CPU time is accounted (v2 ``cpu.stat``, v1 ``cpuacct``) so the
CPU bound can be checked from the host. Where no hierarchy is writable the
limits fall back to rlimits and ``degraded`` says what is weaker or missing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sparring.errors import SandboxUnavailableError

log = logging.getLogger("sparring.sandbox")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "sparring"


def cgroups_forced_off() -> bool:
    """``SPARRING_CGROUPS=off``: limits fall back to rlimits even where cgroups are writable."""
    return os.environ.get("SPARRING_CGROUPS", "").lower() in ("off", "0", "no", "rlimits")


def cgroup_version(root: Path = CGROUP_ROOT) -> str:
    """``v2`` (unified), ``v1`` (one hierarchy per controller) or ``none`` (nothing mounted)."""
    if (root / "cgroup.controllers").is_file():
        return "v2"
    if any((root / c).is_dir() for c in ("memory", "pids", "cpu")):
        return "v1"
    return "none"


def pids_root() -> Path | None:
    """The pids controller's hierarchy (v1 ``pids/`` or the v2 root), if this process may write it."""
    for p in (CGROUP_ROOT / "pids", CGROUP_ROOT):
        if (p / "cgroup.procs").is_file() and (p.name == "pids" or (p / "cgroup.controllers").is_file()):
            return p if os.access(p, os.W_OK) else None
    return None


def _is_v2(root: Path) -> bool:
    return (root / "cgroup.controllers").is_file()


def _write(p: Path, value: str) -> None:
    p.write_text(value)


def _keyed(p: Path) -> dict[str, int]:
    """A flat ``key value`` file (cpu.stat, memory.events) as a dict."""
    out: dict[str, int] = {}
    for line in p.read_text().splitlines():
        k, _, v = line.partition(" ")
        if v.strip().isdigit():
            out[k] = int(v)
    return out


def cgroup_procs(d: Path) -> list[int]:
    """The pids in cgroup ``d`` (none when it is gone or unreadable)."""
    try:  # os-level: no text layer (this runs twice per reset on cgroup v1)
        fd = os.open(f"{d}/cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        return [int(x) for x in pread_all(fd).split()]
    except (OSError, ValueError):
        return []
    finally:
        os.close(fd)


def close_fds(fds: Iterable[int]) -> None:
    """Close each of ``fds`` (one already closed is skipped)."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def pread_all(fd: int) -> bytes:
    """The whole content of a kernel-generated file (procfs, cgroupfs) from its start, read again through
    a descriptor opened earlier: no path walk, no open and close."""
    chunks: list[bytes] = []
    off = 0
    while True:
        b = os.pread(fd, 65536, off)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        off += len(b)


def thaw_dir(d: Path) -> None:
    """Thaw cgroup ``d`` whichever freezer it has (v1 ``freezer.state``, v2 ``cgroup.freeze``): a frozen
    process cannot die."""
    for name, value in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
        with contextlib.suppress(OSError):
            if (d / name).exists():
                (d / name).write_text(value)


def kill_members(dirs: list[Path], rounds: int = 500, pause_s: float = 0.001) -> None:
    """SIGKILL every process in the cgroups ``dirs`` until they are empty, at most ``rounds`` passes
    (a fork race ends within the pids limit). The one kill loop of every cgroup teardown: a sandbox's
    close, the reaper's and the OCI backend's. The pause between passes starts at 0.2 ms and doubles up
    to ``pause_s``: a killed process usually leaves within a fraction of a millisecond, and a close
    waited a whole ``pause_s`` for it."""
    pause = min(0.0002, pause_s)
    for _ in range(rounds):
        left = sorted({p for d in dirs for p in cgroup_procs(d)})
        if not left:
            return
        for p in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        time.sleep(pause)
        pause = min(pause * 2, pause_s)


def _subtree(d: Path) -> list[Path]:
    """``d`` and the cgroups below it, deepest first (the order rmdir needs)."""
    return [Path(p) for p, _, _ in os.walk(d, topdown=False)]


def rmdir_tree(d: Path, tree: list[Path] | None = None) -> None:
    """Remove a cgroup directory and its children, deepest first (cgroupfs only allows rmdir); a busy
    or missing one is left as it is. ``tree``: ``d``'s subtree as :func:`_subtree` listed it already."""
    for sub in tree if tree is not None else _subtree(d):
        with contextlib.suppress(OSError):
            sub.rmdir()


def empty_and_remove(dirs: list[Path], wait_s: float = 30.0) -> list[Path]:
    """Thaw, empty and remove the cgroup directories ``dirs`` and any made below them; a missing one is
    fine. Returns those still there (logged; the reaper removes them once empty). ``wait_s=0``: one
    kill pass and one try, nothing logged (the caller waits elsewhere, see ``CgroupSet.destroy``).

    A SIGKILLed process leaves its cgroup only when it has finished exiting, and until then rmdir says
    EBUSY: on a loaded host that takes longer than one kill pass (a clean clone's suite, run beside two
    other suites, left a sandbox's cgroups behind after close). So kill and rmdir are repeated, with a
    growing pause, until every directory is gone or ``wait_s`` has passed, never given up silently.
    """
    pending = [d for d in dirs if d.is_dir()]
    trees = {d: _subtree(d) for d in pending}  # listed once: a cgroup directory holds dozens of files
    for d in pending:
        for sub in trees[d]:
            thaw_dir(sub)
    deadline = time.monotonic() + wait_s
    pause = 0.001
    while pending:
        kill_members([sub for d in pending for sub in trees[d]], rounds=50 if wait_s > 0 else 1)
        for d in pending:
            rmdir_tree(d, trees[d])  # EBUSY while members are still exiting: retried below
        pending = [d for d in pending if d.is_dir()]
        if not pending or time.monotonic() >= deadline:
            break
        trees = {d: _subtree(d) for d in pending}  # again only for what is left (a group made meanwhile)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    if pending and wait_s > 0:
        log.warning(
            "cgroups still busy after %.0f s, left for the reaper: %s", wait_s, ", ".join(map(str, pending))
        )
    return pending


@dataclass
class CgroupSet:
    """The cgroup directories of one sandbox; ``dirs`` maps controller -> directory.

    ``rlimits`` holds the per-process fallback limits used when no cgroup
    hierarchy is writable (a clear warning is logged: rlimits are weaker);
    ``degraded`` names each requested limit that is then weaker or not enforced.
    """

    name: str
    dirs: dict[str, Path] = field(default_factory=dict)
    v2: bool = False
    rlimits: dict[str, int] = field(default_factory=dict)
    degraded: tuple[str, ...] = ()
    _procs_fds: dict[Path, int] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def create(
        cls,
        name: str,
        memory_mb: int | None,
        pids: int | None,
        cpus: float | None,
        root: Path = CGROUP_ROOT,
        freezer: bool = False,
    ) -> CgroupSet:
        limited = not (memory_mb is None and pids is None and cpus is None)
        if not limited and not freezer:
            return cls(name)
        if cgroups_forced_off():
            if not limited:
                return cls(name)
            return cls._fallback(
                name,
                memory_mb,
                pids,
                cpus,
                root,
                SandboxUnavailableError("turned off by SPARRING_CGROUPS=off"),
            )
        try:
            if _is_v2(root):
                return cls._create_v2(name, memory_mb, pids, cpus, root)
            cg = cls._create_v1(name, memory_mb, pids, cpus, root)
            if freezer and (root / "freezer").is_dir():
                d = root / "freezer" / PARENT / name
                try:
                    d.mkdir(parents=True)
                    cg.dirs["freezer"] = d
                except OSError:
                    pass  # no freezer: snapshots then copy a running sandbox
            return cg
        except (OSError, SandboxUnavailableError) as e:
            if not limited:
                return cls(name)
            return cls._fallback(name, memory_mb, pids, cpus, root, e)

    @classmethod
    def _fallback(
        cls,
        name: str,
        memory_mb: int | None,
        pids: int | None,
        cpus: float | None,
        root: Path,
        err: Exception,
    ) -> CgroupSet:
        with contextlib.suppress(Exception):
            cls(name, {c: root / c / PARENT / name for c in ("memory", "pids", "cpu", "cpuacct")}).destroy()
        why = err.strerror if isinstance(err, OSError) else str(err)
        rl: dict[str, int] = {}
        degraded: list[str] = []
        if memory_mb is not None:
            rl["as"] = memory_mb * 1024 * 1024
            degraded.append("memory: address-space rlimit per process, OOM kills not reported")
        if pids is not None:
            rl["nproc"] = pids
            degraded.append("pids: process rlimit per user")
        if cpus is not None:
            degraded.append("cpus: not enforced")
        log.warning(
            "cgroups at %s are not writable (%s): falling back to rlimits (memory as address space per process, "
            "pids per user%s); OOM kills will not be reported. Run as root for real limits.",
            root, why, ", no CPU share limit" if cpus is not None else "",
        )  # fmt: skip
        return cls(name, rlimits=rl, degraded=tuple(degraded))

    def freeze(self, timeout: float = 2.0) -> bool:
        """Stop every process of the sandbox (invisibly to them); False when there is no freezer."""
        if self.v2:
            d = self.dirs["unified"]
            _write(d / "cgroup.freeze", "1")
            state, want = d / "cgroup.events", "frozen 1"
        elif "freezer" in self.dirs:
            d = self.dirs["freezer"]
            _write(d / "freezer.state", "FROZEN")
            state, want = d / "freezer.state", "FROZEN"
        else:
            return False
        deadline = time.monotonic() + timeout
        while want not in state.read_text() and time.monotonic() < deadline:
            time.sleep(0.0002)
        return True

    def thaw(self) -> None:
        if self.v2:
            _write(self.dirs["unified"] / "cgroup.freeze", "0")
        elif "freezer" in self.dirs:
            _write(self.dirs["freezer"] / "freezer.state", "THAWED")

    @classmethod
    def _create_v2(
        cls, name: str, memory_mb: int | None, pids: int | None, cpus: float | None, root: Path
    ) -> CgroupSet:
        parent = root / PARENT
        parent.mkdir(exist_ok=True)
        wanted = {"memory": memory_mb, "pids": pids, "cpu": cpus}
        enable = " ".join(f"+{c}" for c, v in wanted.items() if v is not None)
        if enable:
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
    def _create_v1(
        cls, name: str, memory_mb: int | None, pids: int | None, cpus: float | None, root: Path
    ) -> CgroupSet:
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
                acct = root / "cpuacct"
                if not (d / "cpuacct.usage").exists() and acct.is_dir():  # not co-mounted: its own group
                    a = acct / PARENT / name
                    a.mkdir(parents=True)
                    cg.dirs["cpuacct"] = a
        return cg

    def cpu_stat(self) -> dict[str, int]:
        """CPU accounting of the sandbox so far, the same keys on v1 and v2 (those available):
        ``usage_us`` (CPU time used), ``nr_throttled`` (periods the quota stopped it), ``throttled_us``."""
        out: dict[str, int] = {}
        try:
            if self.v2:
                stat = _keyed(self.dirs["unified"] / "cpu.stat")
                for key, ours in (("usage_usec", "usage_us"), ("nr_throttled", "nr_throttled")):
                    if key in stat:
                        out[ours] = stat[key]
                if "throttled_usec" in stat:
                    out["throttled_us"] = stat["throttled_usec"]
                return out
            if "cpu" in self.dirs:
                stat = _keyed(self.dirs["cpu"] / "cpu.stat")
                if "nr_throttled" in stat:
                    out["nr_throttled"] = stat["nr_throttled"]
                if "throttled_time" in stat:
                    out["throttled_us"] = stat["throttled_time"] // 1000
            for ctrl in ("cpuacct", "cpu"):
                f = self.dirs[ctrl] / "cpuacct.usage" if ctrl in self.dirs else None
                if f is not None and f.exists():
                    out["usage_us"] = int(f.read_text()) // 1000
                    break
        except (OSError, ValueError):
            pass
        return out

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

    def hold(self) -> None:
        """On cgroup v2, keep the group's ``cgroup.procs`` open, so :meth:`pids` rereads it without a path
        walk. Not on v1: there an open ``cgroup.procs`` serves the pid list it built first for up to a
        second (the kernel's pidlist cache, kept per open file), so a killed process would still be
        listed; v1 groups are read by path every time. Called once, by the thread that made the groups;
        :meth:`destroy` closes them."""
        if not self.v2:
            return
        for d in self.dirs.values():
            if d not in self._procs_fds:
                with contextlib.suppress(OSError):
                    self._procs_fds[d] = os.open(d / "cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in self.dirs.values():
            fd = self._procs_fds.get(d)
            if fd is None:
                out.update(cgroup_procs(d))
                continue
            try:
                out.update(int(x) for x in pread_all(fd).split())
            except (OSError, ValueError):
                out.update(cgroup_procs(d))  # as without the descriptor: none when the group is gone
        return sorted(out)

    def release(self) -> None:
        """Close the descriptors :meth:`hold` opened."""
        fds, self._procs_fds = self._procs_fds, {}
        close_fds(fds.values())

    def destroy(self, wait_s: float = 30.0) -> bool:
        """Kill whatever is left in the groups and remove them, waiting up to ``wait_s`` for members that
        are still exiting; whether all are gone (those left stay in ``dirs``, to destroy again)."""
        self.release()
        left = set(empty_and_remove(list(self.dirs.values()), wait_s))
        self.dirs = {c: d for c, d in self.dirs.items() if d in left}
        return not left
