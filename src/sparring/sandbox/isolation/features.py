"""What this host gives the sandbox: the one place each isolation feature is detected.

The backends decide with these functions (overlay or copy mode, cgroups or rlimits, the C or Python
exec server, whether the OCI backend can run), and ``sparring doctor`` reports the same answers, so
what the doctor says is what a sandbox will do. Each probe is cheap (a stat, a file read, or one
short bubblewrap / unshare run) and never changes the host beyond a scratch directory or cgroup it
removes again.

Forcing a fallback (what a cluster user without root gets, testable as root): the local backend's
``mode="copy"`` (or ``SPARRING_SANDBOX_MODE=copy``) for copy-mode workspaces, ``SPARRING_CGROUPS=off``
for rlimits instead of cgroups, ``SPARRING_EXEC_SERVER=python`` for the Python exec server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sparring.errors import SandboxUnavailableError
from sparring.sandbox.isolation.cgroups import CGROUP_ROOT, CgroupSet, cgroup_version, pids_root

PROBE_TIMEOUT_S = 10.0


def default_root() -> Path:
    """Where sandboxes live: ``$SPARRING_SANDBOX_ROOT``, else /tmp/sparring-sandboxes for root and
    /tmp/sparring-sandboxes-<uid> for anyone else (root's directory is not writable by other users)."""
    env = os.environ.get("SPARRING_SANDBOX_ROOT")
    if env:
        return Path(env)
    uid = os.geteuid()
    return Path("/tmp/sparring-sandboxes" if uid == 0 else f"/tmp/sparring-sandboxes-{uid}")


# ---------- workspace layers: overlay or copy ----------
def overlay_in_kernel() -> bool:
    """Whether the kernel knows overlayfs at all (/proc/filesystems)."""
    try:
        return "overlay" in Path("/proc/filesystems").read_text()
    except OSError:
        return False


def overlay_decision(mode: str = "auto") -> tuple[bool, str]:
    """``(use overlay, why not)`` for the local backend: overlay needs root (the host mounts the
    layers), overlayfs in the kernel and no forced copy mode (argument or ``SPARRING_SANDBOX_MODE``)."""
    if mode == "copy" or os.environ.get("SPARRING_SANDBOX_MODE") == "copy":
        return False, "copy mode was asked for (mode=copy / SPARRING_SANDBOX_MODE=copy)"
    if os.geteuid() != 0:
        return False, "not root: the host cannot mount the workspace layers"
    if not overlay_in_kernel():
        return False, "the kernel has no overlayfs (/proc/filesystems)"
    return True, ""


def overlay_in_userns() -> tuple[bool, str]:
    """Whether an unprivileged user namespace may mount overlayfs (kernel >= 5.11): what a rootless
    overlay mode would need. One ``unshare`` run over scratch directories."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False, "unshare (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="sparring-ovl-probe-") as d:
        for sub in ("lower", "upper", "work", "merged"):
            os.mkdir(os.path.join(d, sub))
        script = (
            f"mount -t overlay overlay -o lowerdir={d}/lower,upperdir={d}/upper,workdir={d}/work {d}/merged"
        )
        try:
            r = subprocess.run(
                [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script],
                capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, str(e)
        return r.returncode == 0, _last_line(r.stderr)


# ---------- bubblewrap, user namespaces, seccomp ----------
def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def require_bwrap() -> str:
    """bubblewrap's path, or the one-line error saying how to install it."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailableError(
            "bubblewrap (bwrap) is not installed: run `make setup` as root or `apt-get install bubblewrap`"
        )
    return path


def bwrap_version() -> str | None:
    path = bwrap_path()
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().removeprefix("bubblewrap ").strip() or None


def _probe_root() -> list[str]:
    """Just enough of the host for ``/bin/true``: /usr, and /bin, /sbin and /lib* as the host has them (links
    or directories). Not ``--ro-bind / /``: that copies every mount of the host into the probe, one by one
    (every live sandbox has about twenty), and on a host running a suite's sandboxes it outlasted the
    probe's timeout, so ``doctor`` said user namespaces were missing."""
    out = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(d):
            out += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            out += ["--ro-bind", d, d]
    return out


def bwrap_probe(seccomp_program: bytes | None = None) -> tuple[bool, str]:
    """Run ``true`` under bubblewrap in a new user namespace (as unprivileged sandboxes do), with the
    sandbox's seccomp filter when given: ``(worked, bubblewrap's last error line)``."""
    path = require_bwrap()
    argv = [path, "--unshare-user", "--unshare-pid", *_probe_root(), "--proc", "/proc"]
    fds: tuple[int, ...] = ()
    if seccomp_program is not None:
        r, w = os.pipe()
        os.write(w, seccomp_program)
        os.close(w)
        argv += ["--seccomp", str(r)]
        fds = (r,)
    try:
        out = subprocess.run(
            [*argv, "--", "/bin/true"], capture_output=True, text=True, pass_fds=fds, timeout=PROBE_TIMEOUT_S
        )
        return out.returncode == 0, _last_line(out.stderr)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def userns_limits() -> dict[str, str]:
    """The sysctls that allow or forbid unprivileged user namespaces, where this kernel has them."""
    out: dict[str, str] = {}
    for name in (
        "user/max_user_namespaces",
        "kernel/unprivileged_userns_clone",
        "kernel/apparmor_restrict_unprivileged_userns",
    ):
        with contextlib.suppress(OSError):
            out[name.replace("/", ".")] = Path("/proc/sys", name).read_text().strip()
    return out


def seccomp_in_kernel() -> bool:
    """Whether the kernel has seccomp filtering (the ``Seccomp:`` line of /proc/self/status)."""
    try:
        return any(ln.startswith("Seccomp:") for ln in Path("/proc/self/status").read_text().splitlines())
    except OSError:
        return False


# ---------- cgroups ----------
@dataclass(frozen=True)
class CgroupProbe:
    """What a sandbox's cgroup set gets on this host: the version, the controllers it could create
    groups in (``memory``, ``pids``, ``cpu``, ``freezer``...), and the limits that are weaker."""

    version: str
    controllers: tuple[str, ...]
    degraded: tuple[str, ...]


def probe_cgroups(root: Path = CGROUP_ROOT) -> CgroupProbe:
    """Create (and remove) a real sandbox cgroup set with every limit and the freezer, exactly as a
    sandbox does: the controllers it got are the writable / delegated ones."""
    cg = CgroupSet.create(f"doctor-{os.getpid()}", 64, 64, 0.5, root=root, freezer=True)
    try:
        ctrls = tuple(sorted(cg.dirs)) if not cg.v2 else _v2_controllers(cg.dirs["unified"])
        if cg.v2:
            ctrls = (*ctrls, "freezer")  # cgroup.freeze is part of every v2 group
        return CgroupProbe(cgroup_version(root), ctrls, cg.degraded)
    finally:
        with contextlib.suppress(Exception):
            cg.destroy()


def _v2_controllers(d: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted((d / "cgroup.controllers").read_text().split()))
    except OSError:
        return ()


# ---------- the exec server ----------
def c_compiler() -> str | None:
    """The C compiler the exec server is built with (``cc``, else ``gcc``), or None."""
    return shutil.which("cc") or shutil.which("gcc")


def exec_server_choice() -> str:
    """``$SPARRING_EXEC_SERVER`` (auto, c, python); auto picks C when a compiler builds it."""
    return os.environ.get("SPARRING_EXEC_SERVER", "auto")


# ---------- the OCI backend ----------
INSTALL_HINT = "run `make setup` as root (apt-get install podman runc catatonit busybox-static)"


def podman_argv() -> list[str]:
    """``podman`` with the global flags this backend always uses (runc: crun fails on cgroup v1 here)."""
    podman = shutil.which("podman")
    if podman is None:
        raise SandboxUnavailableError(f"podman is not installed: {INSTALL_HINT}")
    if shutil.which("runc") is None:
        raise SandboxUnavailableError(f"runc is not installed: {INSTALL_HINT}")
    return [podman, "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "none"]


def oci_problem() -> str | None:
    """Why the OCI backend cannot run here (one line saying what to do), or None when it can."""
    try:
        podman_argv()
    except SandboxUnavailableError as e:
        return str(e)
    if os.geteuid() != 0 or not overlay_in_kernel():
        return (
            "the OCI backend needs root and overlayfs (it mounts the workspace layers on the host): "
            "run as root or use the local backend"
        )
    if pids_root() is None:
        return (
            "the OCI backend needs a writable pids cgroup hierarchy (cgroup v1 pids/ or v2) to kill "
            "what a timed-out command started: run as root"
        )
    return None


# ---------- disk ----------
def free_disk_bytes(path: Path | None = None) -> tuple[Path, int]:
    """Free bytes where sandbox layers go (the nearest existing parent of the sandbox root)."""
    p = Path(path or default_root()).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p, shutil.disk_usage(p).free


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""
