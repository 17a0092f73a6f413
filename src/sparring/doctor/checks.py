"""The host checks of ``sparring doctor``: each says ok, degraded (what falls back, what that costs)
or missing (the command that installs it).

The sandbox checks call the sandbox's own detection (:mod:`sparring.sandbox.isolation.features`, the functions
the backends decide with), so the report cannot disagree with what a sandbox does. The rest look at
what other parts need: Ray, torch and its CUDA devices, the programs task families and reports run.

JSON form (``sparring doctor --json``), schema ``sparring.doctor/1``::

    {"schema": "sparring.doctor/1",
     "user": {"uid": 0, "name": "root"},
     "summary": {"ok": 12, "degraded": 1, "missing": 2},
     "checks": [{"name": "overlayfs", "group": "sandbox", "status": "ok" | "degraded" | "missing",
                 "detail": "what was found",
                 "fallback": "what is used instead" | null,     (degraded / missing)
                 "cost": "what the fallback costs" | null,      (degraded / missing)
                 "install": "the command that fixes it" | null,
                 "required": true | false}, ...]}

A ``required`` check that is missing (bubblewrap, seccomp, user namespaces) means no sandbox can
start; ``sparring doctor`` then exits 1.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from sparring.errors import SparringError
from sparring.sandbox.isolation import cgroups, features, seccomp

Status = Literal["ok", "degraded", "missing"]
SCHEMA = "sparring.doctor/1"
MIN_FREE_BYTES = 2 << 30  # below this, layer stores and environment layers soon fail to write
APT = "apt-get install -y"


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    group: str
    status: Status
    detail: str
    fallback: str | None = None
    cost: str | None = None
    install: str | None = None
    required: bool = False

    def line(self) -> str:
        """One human line: ``name: detail[; fallback (cost)][; install: cmd]`` (the status is printed
        beside it by the caller, once)."""
        out = f"{self.name}: {self.detail}"
        if self.fallback:
            out += f"; falls back to {self.fallback}" + (f" ({self.cost})" if self.cost else "")
        if self.install:
            out += f"; install: {self.install}"
        return out


# ---------- sandbox ----------
def check_bubblewrap() -> Check:
    version = features.bwrap_version()
    if version is None:
        return Check("bubblewrap", "sandbox", "missing", "bwrap is not on PATH", None,
                     "no local sandbox can start", f"{APT} bubblewrap", required=True)  # fmt: skip
    return Check(
        "bubblewrap", "sandbox", "ok", f"bubblewrap {version} at {features.bwrap_path()}", required=True
    )


def check_userns() -> Check:
    if features.bwrap_path() is None:
        return Check("user namespaces", "sandbox", "missing", "bubblewrap is missing, not probed",
                     install=f"{APT} bubblewrap", required=True)  # fmt: skip
    ok, err = features.bwrap_probe()
    limits = ", ".join(f"{k}={v}" for k, v in features.userns_limits().items())
    if ok:
        return Check("user namespaces", "sandbox", "ok",
                     f"bubblewrap creates a user namespace as uid {os.geteuid()} ({limits})", required=True)  # fmt: skip
    return Check("user namespaces", "sandbox", "missing", f"bubblewrap --unshare-user failed: {err} ({limits})",
                 None, "no local sandbox can start",
                 "as root: sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1 "
                 "(and allow unprivileged user namespaces in AppArmor where it restricts them)",
                 required=True)  # fmt: skip


def check_overlay(mode: str = "auto") -> Check:
    use, why = features.overlay_decision(mode)
    if use:
        return Check("overlayfs", "sandbox", "ok", "root with overlayfs: workspace layers are overlay mounts")
    rootless, err = features.overlay_in_userns() if features.overlay_in_kernel() else (False, "no overlayfs")
    note = (
        "; the kernel allows overlayfs in a user namespace"
        if rootless
        else f"; overlay in a user namespace: {err or 'refused'}"
    )
    return Check(
        "overlayfs", "sandbox", "degraded", why + note,
        "copy-mode workspaces (the workspace is copied per sandbox)",
        "create and reset copy the whole workspace (ms per MB); /tmp, $HOME and /dev/shm are outside the "
        "disk quota and survive reset, so the pool closes sandboxes instead of reusing them",
        None if os.geteuid() != 0 else "unset SPARRING_SANDBOX_MODE / use mode=auto",
    )  # fmt: skip


def check_cgroups() -> Check:
    log = logging.getLogger("sparring.sandbox")
    level = log.level
    log.setLevel(logging.ERROR)  # the fallback's warning is this check's own answer
    try:
        probe = features.probe_cgroups()
    finally:
        log.setLevel(level)
    ctrls = ", ".join(probe.controllers) or "none"
    detail = f"cgroup {probe.version}, writable controllers: {ctrls}"
    if cgroups.cgroups_forced_off():
        detail += " (SPARRING_CGROUPS=off)"
    if not probe.degraded:
        return Check("cgroups", "sandbox", "ok", detail)
    return Check(
        "cgroups", "sandbox", "degraded", detail, "rlimits: " + "; ".join(probe.degraded),
        "memory is bounded per process (address space), pids per user, CPU not at all; OOM kills are not "
        "reported; snapshots copy a running sandbox (no freezer); reset finds and kills the sandbox's processes "
        "by a walk of the host's /proc (its pid namespace), not by freezing its cgroup",
        "run as root, or have systemd delegate a cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes ...)",
    )  # fmt: skip


def check_seccomp() -> Check:
    if not features.seccomp_in_kernel():
        return Check("seccomp", "sandbox", "missing", "the kernel has no seccomp filtering", None,
                     "no local sandbox can start", "a kernel built with CONFIG_SECCOMP_FILTER", required=True)  # fmt: skip
    try:
        prog = seccomp.build_filter()
    except SparringError as e:
        return Check("seccomp", "sandbox", "missing", str(e), required=True)
    if features.bwrap_path() is None:
        return Check("seccomp", "sandbox", "missing", "bubblewrap is missing, filter not tried",
                     install=f"{APT} bubblewrap", required=True)  # fmt: skip
    ok, err = features.bwrap_probe(prog)
    if ok:
        return Check("seccomp", "sandbox", "ok",
                     f"{seccomp.host_arch().name} filter ({len(prog) // 8} instructions) installed by bubblewrap",
                     required=True)  # fmt: skip
    return Check("seccomp", "sandbox", "missing", f"bubblewrap could not install the filter: {err}",
                 None, "no local sandbox can start", f"{APT} bubblewrap (0.8 or newer)", required=True)  # fmt: skip


def check_exec_server() -> Check:
    from sparring.sandbox.local.rootfs import install_server

    choice = features.exec_server_choice()
    cc = features.c_compiler()
    with tempfile.TemporaryDirectory(prefix="sparring-doctor-") as d:
        try:  # the very build a backend does (into a scratch root here)
            kind, _ = install_server(Path(d), choice)
        except SparringError as e:
            kind, cc = "python", None
            choice = str(e)
    if kind == "c":
        return Check("exec server", "sandbox", "ok", f"C exec server built with {cc}")
    why = (
        f"SPARRING_EXEC_SERVER={choice}"
        if choice == "python"
        else ("no C compiler (cc) on PATH" if cc is None else f"{cc} could not build execserver.c")
    )
    return Check("exec server", "sandbox", "degraded", why, "the Python exec server",
                 "every sandbox start takes ~10 ms more", f"{APT} gcc libc6-dev" if choice != "python" else None)  # fmt: skip


def check_oci() -> Check:
    problem = features.oci_problem()
    name = "podman/runc (OCI backend)"
    if problem is None:
        return Check(
            name, "sandbox", "ok", f"podman at {shutil.which('podman')}, runc at {shutil.which('runc')}"
        )
    installed = shutil.which("podman") is not None and shutil.which("runc") is not None
    fix = (
        "run as root (the OCI backend mounts layers on the host)"
        if installed
        else (f"as root: {APT} podman runc catatonit busybox-static")
    )
    return Check(name, "sandbox", "missing", problem, "the local backend only",
                 "tasks that name a container image cannot run (--backend oci)", fix)  # fmt: skip


def check_disk() -> Check:
    where, free = features.free_disk_bytes()
    detail = f"{free / (1 << 30):.1f} GiB free at {where}"
    if free >= MIN_FREE_BYTES:
        return Check("disk for layers", "sandbox", "ok", detail)
    return Check("disk for layers", "sandbox", "degraded", detail, None,
                 f"under {MIN_FREE_BYTES >> 30} GiB: snapshot layers and environment layers may fail to write",
                 "free space or point SPARRING_SANDBOX_ROOT at a larger disk")  # fmt: skip


# ---------- Python runtimes ----------
def _version(dist: str) -> str | None:
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(dist)
    return None


def check_ray() -> Check:
    v = _version("ray")
    if v is None:
        return Check("ray", "runtime", "missing", "not installed", "the local executor",
                     "rollouts run on this machine only", "pip install 'sparring[ray]'")  # fmt: skip
    return Check("ray", "runtime", "ok", f"ray {v}")


def check_torch() -> Check:
    v = _version("torch")
    if v is None:
        return Check("torch", "runtime", "missing", "not installed", None,
                     "no training, no hf: policies", "pip install 'sparring[train]'")  # fmt: skip
    # In a child: importing torch and initialising CUDA costs seconds and memory this process keeps.
    code = "import torch,json;c=torch.cuda.is_available();print(json.dumps([c, torch.cuda.device_count() if c else 0, torch.version.cuda]))"
    try:
        r = subprocess.run([_python(), "-c", code], capture_output=True, text=True, timeout=120)
        cuda, n, built = __import__("json").loads(r.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return Check("torch", "runtime", "degraded", f"torch {v} is installed but does not import", None,
                     "no training", "pip install --force-reinstall 'sparring[train]'")  # fmt: skip
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    vis = f", CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
    if cuda:
        return Check("torch", "runtime", "ok", f"torch {v}, CUDA {built}, {n} visible device(s){vis}")
    kind = "a CPU build" if built is None else f"CUDA {built} build, no visible device{vis}"
    return Check("torch", "runtime", "degraded", f"torch {v} ({kind})", "CPU training",
                 "only tiny models train in reasonable time",
                 "on a GPU machine keep its CUDA build of torch (sparring[train] accepts torch>=2.4,<3)")  # fmt: skip


def _python() -> str:
    import sys

    return sys.executable


# ---------- programs the task families and reports run ----------
# Only programs something in this version runs: a family (FAMILY_PROGRAMS, checked by a test against
# the registered families) or the report pages' headless browser checks.
PROGRAMS: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    # name, executables (any), apt package, what is lost without it
    ("LibreOffice", ("soffice", "libreoffice"), "libreoffice-calc-nogui", "spreadsheet tasks cannot recalculate or convert"),
    ("chromium", ("chromium", "chromium-browser"), "chromium", "report pages cannot be checked in a headless browser (tests only)"),
)  # fmt: skip
FAMILY_PROGRAMS: dict[str, str] = {"LibreOffice": "spreadsheet"}


def check_program(name: str, exes: Iterable[str], pkg: str, loss: str) -> Check:
    for exe in exes:
        path = shutil.which(exe) or next(
            (p for p in (f"/usr/sbin/{exe}", f"/sbin/{exe}") if os.access(p, os.X_OK)), None
        )
        if path:
            return Check(name, "families", "ok", path)
    return Check(
        name, "families", "missing", f"{' / '.join(exes)} not found", None, loss, f"as root: {APT} {pkg}"
    )


# ---------- the report ----------
SANDBOX_CHECKS: tuple[Callable[[], Check], ...] = (
    check_bubblewrap, check_userns, check_overlay, check_cgroups, check_seccomp, check_exec_server, check_oci, check_disk,
)  # fmt: skip


def run_checks() -> list[Check]:
    """Every check, sandbox first."""
    out = [c() for c in SANDBOX_CHECKS]
    out += [check_ray(), check_torch()]
    out += [check_program(*p) for p in PROGRAMS]
    return out


def report(checks: list[Check]) -> dict[str, Any]:
    """The JSON object of ``sparring doctor --json`` (schema in this module's docstring)."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    summary = {s: sum(c.status == s for c in checks) for s in ("ok", "degraded", "missing")}
    return {"schema": SCHEMA, "user": {"uid": uid, "name": name}, "summary": summary,
            "checks": [asdict(c) for c in checks]}  # fmt: skip


def sandbox_degradations(mode: str = "auto") -> list[Check]:
    """The sandbox fallbacks in force here (overlay, cgroups, exec server): what ``sparring demo`` and
    ``rollout`` print once at start. Cheap: no probe runs a sandbox or builds anything."""
    out: list[Check] = []
    if not features.overlay_decision(mode)[0]:
        out.append(check_overlay(mode))
    cg = check_cgroups()
    if cg.status != "ok":
        out.append(cg)
    if features.exec_server_choice() == "python" or features.c_compiler() is None:
        out.append(Check("exec server", "sandbox", "degraded", "no C compiler or SPARRING_EXEC_SERVER=python",
                         "the Python exec server", "every sandbox start takes ~10 ms more"))  # fmt: skip
    return out
