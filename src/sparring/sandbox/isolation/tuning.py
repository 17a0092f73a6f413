"""Host tuning for sandbox start-up: cgroup ``favordynmods``.

Every sandbox start moves a process into its cgroups. The kernel guards
migrations with one global per-CPU rwsem whose writers wait for an RCU grace
period unless a migration ran moments before; on an otherwise idle host that
wait is several milliseconds (here: joining a cgroup costs ~1.5 ms right after
another join, ~10 ms after 30 ms of quiet, which made a sandbox's cold create
~15 ms instead of ~5 ms). The cgroup v2 mount option ``favordynmods`` keeps
that rwsem in its writer-friendly mode, for v1 controllers too, at the stated
cost of slightly dearer fork and exit.

It changes the whole host until reboot, so Sparring never sets it on its own:
``sparring sandbox tune`` shows the state and ``--apply`` sets it (root).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparring.errors import SandboxError
from sparring.sandbox.isolation import mounts

OPTION = "favordynmods"
# mount(2) flags of a mount (not of its superblock): a remount must pass the current ones again.
_MOUNT_FLAGS = {"ro": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048}
MS_RELATIME = 1 << 21


@dataclass(frozen=True)
class Cgroup2Mount:
    path: Path
    mount_opts: tuple[str, ...]
    super_opts: tuple[str, ...]

    @property
    def favordynmods(self) -> bool:
        return OPTION in self.super_opts


def cgroup2_mount(mountinfo: str | None = None) -> Cgroup2Mount | None:
    """The host's cgroup v2 mount (hybrid: /sys/fs/cgroup/unified), if any."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        f, r = left.split(), right.split()
        if len(f) >= 6 and len(r) >= 3 and r[0] == "cgroup2":
            return Cgroup2Mount(Path(f[4]), tuple(f[5].split(",")), tuple(r[2].split(",")))
    return None


def state() -> dict[str, object]:
    m = cgroup2_mount()
    if m is None:
        return {"cgroup2_mount": None, OPTION: False, "supported": False}
    return {"cgroup2_mount": str(m.path), OPTION: m.favordynmods, "supported": True}


def remount_args(m: Cgroup2Mount) -> tuple[int, str]:
    """mount(2) flags and data that add ``favordynmods`` and keep every other option as it is."""
    flags = mounts.MS_REMOUNT
    for o in m.mount_opts:
        flags |= _MOUNT_FLAGS.get(o, 0)
        if o == "relatime":
            flags |= MS_RELATIME
    keep = [o for o in m.super_opts if o not in ("rw", "ro", OPTION)]
    return flags, ",".join([*keep, OPTION])


def apply() -> Cgroup2Mount:
    """Set ``favordynmods`` on the cgroup v2 mount (idempotent); returns the mount as it is now."""
    m = cgroup2_mount()
    if m is None:
        raise SandboxError("no cgroup v2 mount on this host: favordynmods needs cgroup2 (hybrid or unified)")
    if m.favordynmods:
        return m
    flags, data = remount_args(m)
    mounts.mount("none", m.path, "cgroup2", data, flags=flags)
    now = cgroup2_mount()
    if now is None or not now.favordynmods:
        raise SandboxError(f"the kernel did not take {OPTION} on {m.path} (it needs Linux 6.0 or newer)")
    return now
