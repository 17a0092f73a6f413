"""OCI sandbox backend, host side: one long-lived podman (runc) container per sandbox, a shell exec server inside.

Layout of one sandbox under the backend root::

    <root>/oci-<id>/
        owner, cid     pid of the owning process, container id (the reaper removes orphans)
        rw/            tmpfs of size disk_mb (the disk quota) holding upper/ and work/
        ws/            a shared bind mount; the overlay (upper over [layers...] over the task
                       workspace) is mounted on top of it and reaches the container's /workspace
                       (and the spec's workspace_alias, e.g. /testbed: bound from ws/ as well),
                       a slave of ws/, by mount propagation, so reset/restore/snapshot
                       remount on the host without touching the container
        ctl/           bound at /.sparring: the exec server, its request FIFO, per-exec FIFOs

Why an exec server: ``podman exec`` costs a podman + conmon + runc start per
command (hundreds of ms here). Instead the container's main process is a
``/bin/sh`` loop reading exec ids from a FIFO; each command is a child of the
container's own processes, so it keeps every restriction podman set up
(namespaces, cgroups, seccomp, no capabilities, no-new-privileges, read-only
root). One exec costs a few forks inside the container and a handful of
syscalls on the host. The server's shell is the host's static busybox, bound in execute-only
(sealed.py), so the image needs no shell or tools of its own.

Every command first moves itself (before it runs anything) into its own pids cgroup (a sibling of the
container's, under a parent that carries the pids limit, bound at
/.sparring-cg), so a timeout kills everything the command started, even
processes that called setsid or double-forked. This needs root on the host (a
writable cgroup v1 pids hierarchy or cgroup v2).

Commands run as root *inside* the container with all capabilities dropped
(there is no user namespace, so the workspace overlay, owned by host root, is
writable only to uid 0); network is ``--network none`` (an empty namespace
with loopback only), so spec.network ``none`` and ``loopback`` are the same here.

The exec server has the commands' uid, and the kernel lets a process change the limits, priority,
scheduling, I/O priority or affinity of any process of its uid; what the server carries, every later
command inherits. So (docs/threat-model.md, issue 33):

* the container runs under the backend's seccomp profile (profile.py): podman's default plus EPERM for
  every call aimed at another process (the local backend's list, isolation/seccomp.py);
* ``reset`` and ``restore`` kill every process but podman's init and the server, from the host, by the
  container's cgroups, then check from the host that only those two are left and that both are in the
  state recorded at create (:class:`~sparring.sandbox.isolation.init_state.InitState`); otherwise the
  sandbox is retired (closed, SandboxError), and ``healthy`` is False, so a pool replaces it (reset.py);
* the server's shell and podman's init are execute-only copies (sealed.py), so neither is dumpable and no
  command can read or write their memory through /proc;
* the same reset returns /tmp, /var/tmp, /run, /dev and /dev/shm to their birth listing (scratch.py) and
  empties the IPC namespace; ctl/ is nobody's, read-only to the commands.

A spec naming a task's own image (``SandboxSpec.image``) runs that image as its whole environment, as
the local backend does (issue 34): no host Python layer or host /usr is bound in, the commands get the
image's config (``Env``, PATH with /.sparring/bin last: podman's inspection of the image, once per
reference, image.py) and a ``python`` in ctl/bin/ to the image's python3 where its PATH has none
(sandbox.py). The default busybox image gets the spec's layer and the host's /usr (podman.py).

Where each part lives (all of it runs on the host; only the two scripts of support.py run inside):
this module, :class:`OCIBackend` (checks, the default image, creating sandboxes, reaping what a dead
owner left); sandbox.py, :class:`OCISandbox` (directories, mounts, exec, diff, snapshot, reset);
podman.py, the podman command lines; reset.py, the host's kill and birth-state check behind every
reset; support.py, the exec server's protocol and cgroup chores; scratch.py, profile.py, sealed.py and
image.py as their docstrings say.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import uuid
from pathlib import Path

from sparring.errors import SandboxError, SandboxUnavailableError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation import features
from sparring.sandbox.isolation.cgroups import pids_root
from sparring.sandbox.isolation.features import podman_argv
from sparring.sandbox.isolation.reaper import orphaned
from sparring.sandbox.oci import podman
from sparring.sandbox.oci.image import ImageFacts, ensure_image, inspect_image
from sparring.sandbox.oci.profile import write_profile
from sparring.sandbox.oci.sandbox import OCISandbox, teardown_dir
from sparring.sandbox.oci.sealed import sealed_binaries
from sparring.sandbox.oci.support import CG_PREFIX, CGROUP_ROOT, remove_cgroups
from sparring.sandbox.storage.layers import discard

__all__ = ["CG_PREFIX", "CGROUP_ROOT", "OCIBackend", "OCISandbox"]


class OCIBackend:
    """Creates :class:`OCISandbox` es from a container image (default: the local busybox image)."""

    name = "oci"

    def __init__(self, image: str | None = None, root: Path | None = None) -> None:
        problem = features.oci_problem()  # the same check `sparring doctor` reports
        if problem is not None:
            raise SandboxUnavailableError(problem)
        self.podman = podman_argv()
        root_pids = pids_root()
        assert root_pids is not None  # oci_problem checked it
        self.pids_root = root_pids
        self._image = image
        self.root = Path(root or features.default_root())
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.root / "oci-layers").mkdir(exist_ok=True)
        # podman's default seccomp profile, and no call that can bend another process (profile.py)
        self.seccomp_profile = write_profile(self.root)
        # the server's shell and the init, execute-only: not dumpable, their memory not the commands' (sealed.py)
        self.sealed_sh, self.sealed_init = sealed_binaries(self.root)
        self.snapshots: dict[str, tuple[Path, ...]] = {}
        self._facts: dict[str, ImageFacts] = {}
        self.reap_stale()

    @property
    def image(self) -> str:
        """The default image, built on first use (``podman import``, no registry needed)."""
        if self._image is None:
            self._image = ensure_image()
        return self._image

    def image_facts(self, ref: str) -> ImageFacts:
        """Podman's id and config of a task's image ``ref``, inspected once per reference (as the local
        backend resolves a reference once): every sandbox of it runs that id with that config."""
        found = self._facts.get(ref)
        if found is None:
            found = self._facts[ref] = inspect_image(self.podman, ref)
        return found

    async def create(
        self, spec: SandboxSpec, snapshot: str | None = None, image: str | None = None
    ) -> OCISandbox:
        if snapshot is not None and snapshot not in self.snapshots:
            raise SandboxError(f"unknown snapshot {snapshot!r}: take one with sandbox.snapshot() first")
        if spec.workspace is not None and not Path(spec.workspace).is_dir():
            raise SandboxError(f"workspace {spec.workspace} is not a directory")
        for src in (*spec.extra_ro.values(), *spec.extra_rw.values()):
            if not Path(src).exists():
                raise SandboxError(f"extra mount source {src} does not exist")
        if image is None:
            image = spec.image
        img = image if image is not None else await asyncio.to_thread(lambda: self.image)
        sb = OCISandbox(self, spec, img, layers=self.snapshots.get(snapshot or "", ()))
        try:
            await asyncio.to_thread(sb._setup)
        except BaseException:
            await asyncio.to_thread(sb._teardown)
            raise
        return sb

    async def aclose(self) -> None:
        """Nothing held between containers (each is made on demand)."""

    def reap_stale(self) -> int:
        """Remove sandboxes (containers, mounts, cgroups, dirs) whose owning process is dead."""
        n = 0
        for d in self.root.glob("oci-*"):
            if d.name == "oci-layers":
                continue
            try:
                owner = int((d / "owner").read_text())
            except (OSError, ValueError):
                owner = -1
            if orphaned(owner):
                teardown_dir(self.podman, d)
                n += 1
        r = subprocess.run(
            self.podman + ["ps", "-a", "--filter", f"label={podman.LABEL}", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        with contextlib.suppress(ValueError, TypeError):
            for c in json.loads(r.stdout or "[]"):
                labels = c.get("Labels") or {}
                with contextlib.suppress(ValueError):
                    if orphaned(int(labels.get(podman.LABEL, "-1"))):
                        podman.remove(self.podman, c["Id"])
                        sdir = labels.get("sparring.oci.dir")
                        if sdir and Path(sdir).name.startswith("oci-"):
                            teardown_dir(self.podman, Path(sdir))
                        remove_cgroups(labels.get("sparring.oci.id", "-"))
                        n += 1
        for layer in (self.root / "oci-layers").glob("snap-*"):
            parts = layer.name.split("-")
            if orphaned(int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1):
                discard(layer)
        return n

    def new_layer_dir(self) -> tuple[str, Path]:
        sid = f"snap-{os.getpid()}-{uuid.uuid4().hex[:16]}"
        return sid, self.root / "oci-layers" / sid
