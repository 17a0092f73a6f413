"""The reaper: nothing of a sandbox outlives its owner.

A sandbox's id names its owner's pid (``<pid>-<12 hex>``, :func:`new_sandbox_id`),
and so do its directory ``sb-<id>`` and its cgroups ``sparring/<id>``: each
comes into existence owned, in one mkdir, so a process killed between any two
steps of making (or removing) a sandbox leaves nothing the reaper cannot
attribute. ``reap(root)`` removes, for every sandbox whose owner is dead: its
processes (they are already gone when bubblewrap died with its parent, but a
cgroup is emptied anyway), its mounts, its cgroups and its directory; then every
empty cgroup of a dead owner on the host (one made just before its owner died,
not yet listed in the directory), snapshot records of dead owners and the layers
no record needs.

A restarted backend calls ``reap`` at start. So that nothing is left even
when no backend starts again, every owning process also gets a *watchdog*: a
small detached process (``python -m sparring.sandbox.isolation.reaper``) that waits on
a pidfd for the owner to die, then reaps. One watchdog serves every backend
of one owner on one root.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from sparring.errors import SandboxError
from sparring.pids import pid_alive
from sparring.sandbox.crashpoint import crash_point
from sparring.sandbox.isolation import mounts
from sparring.sandbox.isolation.cgroups import CGROUP_ROOT, PARENT, empty_and_remove
from sparring.sandbox.storage.layers import LayerStore, discard


def orphaned(owner: int) -> bool:
    """True when ``owner`` (a pid, -1 if unknown) is neither this process nor alive."""
    return owner != os.getpid() and not (owner > 0 and pid_alive(owner))


_OWNED_ID = re.compile(r"([1-9][0-9]*)-[0-9a-f]{12}")


def new_sandbox_id() -> str:
    """A fresh sandbox id naming this process as its owner: ``<pid>-<12 hex>``."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def id_owner(sandbox_id: str) -> int:
    """The owner pid a sandbox id (or ``sb-<id>`` directory, or cgroup) names; -1 for an id without one."""
    m = _OWNED_ID.fullmatch(sandbox_id.removeprefix("sb-"))
    return int(m.group(1)) if m else -1


def _owner(d: Path) -> int:
    """The owner file (what a backend wrote, or a test set), else the owner the name carries."""
    try:
        return int((d / "owner").read_text())
    except (OSError, ValueError):
        return id_owner(d.name)


# Directories of older versions were named ``sb-<12 hex>`` and owned only through an owner file written
# after the mkdir: such a directory without one may be being made right now, or be the leftover of an
# owner killed in between. The latter is only told from the former by age.
UNOWNED_GRACE_S = 60.0


def _unowned_and_young(d: Path) -> bool:
    try:
        return time.time() - d.stat().st_mtime < UNOWNED_GRACE_S
    except OSError:
        return False


def remove_cgroup(cg: Path) -> None:
    """Thaw, empty (SIGKILL) and remove one cgroup directory; missing is fine."""
    empty_and_remove([cg])


def reap_cgroups(owner: int | None = None, root: Path = CGROUP_ROOT) -> int:
    """Remove every empty sandbox cgroup on the host whose owner (named by its id) is dead, or of
    ``owner`` only: those made just before their owner died, listed in no sandbox directory yet.

    Only empty ones: no process joins a sandbox's cgroups before they are listed (the launcher joins
    them after), and the processes of a listed one are killed through its directory's list. So a
    cgroup whose owner pid only looks dead here (its creator in another pid namespace sharing this
    cgroup tree) loses no process; rmdir refuses a cgroup in use.
    """
    parents = [root / PARENT, *root.glob(f"*/{PARENT}")]
    n = 0
    for parent in parents:
        with contextlib.suppress(OSError):
            for cg in sorted(parent.iterdir()):
                o = id_owner(cg.name)
                if o == -1 or (owner is not None and o != owner) or not orphaned(o) or not cg.is_dir():
                    continue
                with contextlib.suppress(OSError):
                    cg.rmdir()
                    n += 1
    return n


def remove_sandbox_dir(d: Path) -> None:
    """Kill what is left in the sandbox's cgroups, unmount everything below it, remove it.

    The name still says whose it was after every step, so a reaper killed half way leaves a directory
    the next reap finds orphaned again (the owner file lives on the unmounted tmpfs)."""
    with contextlib.suppress(OSError):
        for line in (d / "cgroups").read_text().splitlines():
            remove_cgroup(Path(line))
    for mp in mounts.mounts_below(d):
        with contextlib.suppress(Exception):
            mounts.umount(mp)
    crash_point("reap-unmounted")
    discard(d)  # iterative and logged: a deep or stubborn tree never stops the reaper


SHM = Path("/dev/shm")


def run_dir() -> Path:
    """The world-traversable directory holding every backend's sandbox dirs: one per user, so a
    directory root made first never locks other users out ($SPARRING_SANDBOX_RUN overrides).

    As root it is on /dev/shm (a tmpfs wherever Linux runs): there a sandbox's directory is only the
    point its own tmpfs is mounted on, and making and removing it on a disk costs a journal write, and
    on a filesystem mounted with ``discard`` a synchronous discard (rmdir 0.46 ms median, 1.9 ms mean
    on the 2-core machine's ext4, against 0.003 ms on tmpfs). Without root (copy mode) the sandbox's
    copied workspace, /tmp and home are plain directories under it: /tmp, on disk."""
    env = os.environ.get("SPARRING_SANDBOX_RUN")
    if env:
        return Path(env)
    uid = os.geteuid()
    if uid == 0 and SHM.is_dir() and not SHM.is_symlink() and os.access(SHM, os.W_OK | os.X_OK):
        return SHM / "sparring-run"
    return Path("/tmp/sparring-run" if uid == 0 else f"/tmp/sparring-run-{uid}")


def sandbox_home(root: Path) -> Path:
    """Where the sandboxes of the backend rooted at ``root`` live.

    bubblewrap enters the sandbox's user namespace before it binds the sandbox
    root, and there host root has no power over host-root-owned directories:
    every directory on the path must be traversable by anyone. A backend root
    may sit in a private directory (a test's tmp dir), so the sandboxes of
    each root live in their own directory under a world-traversable run dir.
    """
    import hashlib

    run = run_dir()
    run.mkdir(parents=True, exist_ok=True, mode=0o711)
    st = os.lstat(run)
    if not os.path.isdir(run) or os.path.islink(run) or st.st_uid != os.geteuid():
        raise SandboxError(
            f"{run} is not a directory of this user (uid {os.geteuid()}): remove it, "
            "or point SPARRING_SANDBOX_RUN at a directory of yours"
        )
    home = run / hashlib.sha256(str(root.absolute()).encode()).hexdigest()[:16]
    home.mkdir(exist_ok=True)
    for d in (run, home):
        os.chmod(d, 0o711)
    link = root / "sandboxes"
    if not link.is_symlink():
        with contextlib.suppress(OSError):
            link.symlink_to(home)  # for people looking for them
    return home


def reap(root: Path, owner: int | None = None) -> int:
    """Remove sandboxes of dead owners (or of ``owner`` only) and unneeded layers; returns sandboxes removed."""
    n = 0
    for d in sandbox_home(root).glob("sb-*"):
        o = _owner(d)
        if (owner is not None and o != owner) or not orphaned(o):
            continue
        if o == -1 and _unowned_and_young(d):
            continue  # being created right now by some process
        remove_sandbox_dir(d)
        n += 1
    reap_cgroups(owner)
    if (root / "layers").is_dir():
        LayerStore(root).gc(orphaned)
    for w in root.glob("watchdog-*"):
        pid = w.name.removeprefix("watchdog-")
        if pid.isdigit() and orphaned(int(pid)):
            with contextlib.suppress(OSError):
                w.unlink()
    return n


def ensure_watchdog(root: Path) -> None:
    """Start this process's watchdog for ``root`` unless one is already running."""
    me = os.getpid()
    mark = root / f"watchdog-{me}"
    with contextlib.suppress(OSError, ValueError):
        if pid_alive(int(mark.read_text())):
            return
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparring.sandbox.isolation.reaper", "--root", str(root), "--owner", str(me)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    mark.write_text(str(proc.pid))


def watch(root: Path, owner: int) -> None:
    """Block until ``owner`` dies, then reap its sandboxes."""
    # Hold the root open: if it is renamed meanwhile (a test's tmp dir being cleaned), follow it.
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:
        fd = -1
    if fd >= 0:
        select.select([fd], [], [])
        os.close(fd)
    time.sleep(0.05)  # let bubblewrap processes finish dying with their parent
    with contextlib.suppress(OSError):
        root = Path(os.readlink(f"/proc/self/fd/{root_fd}"))
    os.close(root_fd)
    if root.is_dir():
        reap(root, owner)
    with contextlib.suppress(OSError):
        (root / f"watchdog-{owner}").unlink()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Reap the sandboxes of a process once it dies.")
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--owner", type=int, required=True)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the owner's terminal must not stop the cleanup
    watch(a.root, a.owner)


if __name__ == "__main__":
    main()
