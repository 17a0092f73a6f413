"""Host side: how an OCI sandbox's ``reset`` and ``restore`` leave nothing of the last user (issue 33).

Everything here runs on the host and reads the container through the host's /proc and cgroupfs; nothing
inside the container is asked. Two processes of a container stay for its whole life, its *residents*:
podman's init and the exec server, its only child. The exec server has the commands' uid, and the kernel
lets a process change the limits, priority, scheduling, I/O priority or affinity of any process of its
uid, so what the server carries every later command inherits. A reset therefore:

1. kills every other process of the container by its host pid, read from the container's cgroups
   (:func:`kill_commands`), and discards the exec ids a command queued for the server;
2. returns /tmp, /var/tmp, /run, /dev and /dev/shm to their birth listing and empties the IPC namespace
   (:func:`clear_scratch`, scratch.py, isolation/ipcns.py);
3. checks that only the residents are left, both in the state recorded at create
   (:class:`~sparring.sandbox.isolation.init_state.InitState`: rlimits, nice, policy, ioprio, affinity,
   autogroup nice, coredump_filter...) and neither stopped nor a zombie (:func:`check_fresh`).

Each step answers with why the sandbox cannot be handed on ("" when it can); on any answer the sandbox
retires it (closed, SandboxError), and :func:`as_born`, which reads the same state, makes ``healthy``
False so a pool replaces it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from sparring.errors import SandboxError
from sparring.sandbox.isolation import ipcns
from sparring.sandbox.isolation.cgroups import cgroup_procs, rmdir_tree
from sparring.sandbox.isolation.init_state import InitState
from sparring.sandbox.isolation.sweep import signal_all
from sparring.sandbox.oci import scratch
from sparring.sandbox.oci.support import SERVER_ARGV

RUNNING = ("R", "S", "D")  # not T (a command may SIGSTOP the server: PID 2 is not immune) nor Z


# ---------- the census: the container's processes, seen from the host ----------
def container_pids(parents: Iterable[Path], cid: str, exec_cg: Path) -> list[int]:
    """Every process of container ``cid``: its cgroup below each of the sandbox's ``parents`` (one per
    hierarchy) and the commands' pids cgroups below ``exec_cg`` (conmon, podman's monitor beside them,
    is not one)."""
    out = {p for parent in parents for p in cgroup_procs(parent / f"libpod-{cid}")}
    for dirpath, _, _ in os.walk(exec_cg):
        out.update(cgroup_procs(Path(dirpath)))
    return sorted(out)


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state first)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2 :].split()


def ppid(pid: int) -> int:
    """The parent of host process ``pid``, -1 when it is gone."""
    try:
        return int(_stat_fields(pid)[1])
    except (OSError, ValueError, IndexError):
        return -1


def run_state(pid: int) -> str:
    """The state letter of host process ``pid`` (R, S, D, T stopped, Z...), "" when it is gone."""
    try:
        return _stat_fields(pid)[0]
    except (OSError, IndexError):
        return ""


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def residents(procs: Collection[int]) -> tuple[int, int] | None:
    """(init, exec server) when ``procs`` are exactly podman's init and the server, its only child;
    else None (the container is still starting)."""
    found = set(procs)
    init = [p for p in found if ppid(p) not in found]
    server = [p for p in found if init and ppid(p) == init[0] and cmdline(p).startswith(SERVER_ARGV)]
    if len(init) == 1 and len(server) == 1 and found == {init[0], server[0]}:
        return init[0], server[0]
    return None


def find_residents(members: Callable[[], list[int]], sid: str, wait_s: float = 60.0) -> tuple[int, int]:
    """The host pids of podman's init and of the exec server, waited for at create (no command ran yet)."""
    deadline = time.monotonic() + wait_s
    while True:
        procs = members()
        found = residents(procs)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise SandboxError(
                f"the exec server of sandbox {sid} did not start (container processes {sorted(set(procs))})"
            )
        time.sleep(0.01)


def others(procs: Iterable[int], keep: Collection[int]) -> list[int]:
    return [p for p in procs if p not in keep]


# ---------- step 1: the kill ----------
def drain_requests(req_fd: int) -> None:
    """Discard the exec ids queued in the server's request FIFO: written from inside, not by the host."""
    try:
        while os.read(req_fd, 65536):
            pass
    except OSError:  # BlockingIOError too: the FIFO is empty
        pass


def remove_command_cgroups(exec_cg: Path) -> None:
    for d in exec_cg.iterdir():
        if d.is_dir():
            rmdir_tree(d)


def kill_commands(
    members: Callable[[], list[int]], keep: Collection[int], req_fd: int, exec_cg: Path, rounds: int = 500
) -> list[int]:
    """SIGKILL every process of the container but ``keep`` (the residents), by the host, from the
    cgroups; requests a command queued for the server are discarded, and the commands' cgroups removed.
    Returns the pids still there after ``rounds`` passes."""
    left: list[int] = []
    for _ in range(rounds):
        drain_requests(req_fd)
        left = others(members(), keep)
        if not left:
            break
        signal_all(left, signal.SIGKILL)
        time.sleep(0.002)
    remove_command_cgroups(exec_cg)
    return left


def survivors(left: list[int]) -> str:
    return f"{len(left)} of its processes survived the kill (host pids {left[:8]})"


# ---------- step 2: the scratch places ----------
def clear_scratch(server_pid: int, birth: scratch.Listing) -> str:
    """Return the scratch places to ``birth`` and empty the IPC namespace; "" or why it failed."""
    try:
        changed = scratch.restore(server_pid, birth)
        ipcns.clear(server_pid)
    except (OSError, SandboxError, RecursionError) as e:  # a tree nested past the walk's depth too
        return f"its scratch places or IPC objects could not be emptied ({type(e).__name__}: {e})"
    if changed:
        return "a command changed what a reset cannot put back outside /workspace: " + ", ".join(changed[:8])
    return ""


# ---------- step 3: the check ----------
def check_resident(pid: int, born: InitState, who: str) -> str:
    """ "" when host process ``pid`` is in its birth state ``born`` and running, else why not."""
    why = born.drift(pid, who)
    if why:
        return why
    state = run_state(pid)
    if state not in RUNNING:
        return f"its {who} is not running (state {state or 'gone'})"
    return ""


def check_fresh(members: list[int], born: Mapping[int, InitState], init_pid: int, server_pid: int) -> str:
    """The host's check after a reset: nothing but the init and the exec server among ``members``, and
    both in the state they were born with; else why not."""
    left = others(members, (init_pid, server_pid))
    if left:
        return f"processes other than its exec server outlived the reset (host pids {left[:8]})"
    for pid, state in born.items():
        why = check_resident(pid, state, "exec server" if pid == server_pid else "init")
        if why:
            return why
    return ""


def as_born(born: Mapping[int, InitState]) -> bool:
    """Whether every resident is still in its birth state and running (a few syscalls each)."""
    return not any(check_resident(pid, state, "") for pid, state in born.items())
