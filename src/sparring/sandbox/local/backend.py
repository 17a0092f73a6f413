"""Local sandbox backend: makes :class:`~sparring.sandbox.local.sandbox.LocalSandbox` es (one long-lived
bubblewrap each, an exec server inside, overlayfs layers) and owns what they share: the layer store,
the network-namespace pool, the pre-started sandboxes (prefork.py) and the reaping of what a dead
owner left (reaper.py). What one sandbox is, and its layout on disk, is in local/sandbox.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparring.errors import SandboxError
from sparring.sandbox.base import WORKSPACE, SandboxSpec
from sparring.sandbox.environment import AGENT_HOST_UID, AGENT_UID, SandboxEnvironment
from sparring.sandbox.isolation import features, mounts, reaper, seccomp
from sparring.sandbox.isolation.netns import NetnsPool, make_user_namespace
from sparring.sandbox.local.prefork import PreforkPool, default_prefork
from sparring.sandbox.local.rootfs import HOME, STATIC_SUFFIX, WRITABLE, RootPlan, install_server
from sparring.sandbox.local.sandbox import LocalSandbox
from sparring.sandbox.storage.layers import LayerStore, Snapshot

if TYPE_CHECKING:
    from sparring.images.store import ImageStore


@dataclass(frozen=True)
class ImageRuntime:
    """What the sandboxes of one image share: its prepared root (their ``/``), environment and server."""

    digest: str
    root: Path
    environment: SandboxEnvironment
    plan: RootPlan
    working_dir: str
    server_kind: str
    server: Path


def check_alias(spec: SandboxSpec, image_root: Path | None) -> None:
    """The spec's workspace alias can be mounted: on an image, a directory of the image reached through no
    symlink (its root is read-only: nothing can be made there)."""
    alias = spec.workspace_alias
    if alias is None or image_root is None:
        return
    try:
        os.close(mounts.open_dir_beneath(image_root, alias))
    except OSError as e:
        why = "is a symlink or under one" if e.errno in (errno.ELOOP, errno.ENOTDIR) else e.strerror
        raise SandboxError(
            f"image {spec.image} has no directory {alias} to show the workspace at ({why}): set the task's "
            "[environment] workspace to where the image keeps its repository"
        ) from None


class LocalBackend:
    """Creates :class:`LocalSandbox` es and owns the layer store."""

    name = "local"

    def __init__(
        self,
        root: Path | None = None,
        environment: SandboxEnvironment | None = None,
        server: str | None = None,
        mode: str = "auto",
        prefork: int | None = None,
        image_store: ImageStore | None = None,
    ) -> None:
        """``prefork``: sandboxes kept started per sandbox shape, so a create costs one mount (prefork.py);
        0 turns it off, None takes $SPARRING_SANDBOX_PREFORK (default 0). Only in overlay mode (root)."""
        if mode not in ("auto", "copy"):
            raise SandboxError(f"unknown sandbox mode {mode!r}: use 'auto' (overlay when root) or 'copy'")
        self.bwrap = features.require_bwrap()
        self.root = Path(root or features.default_root()).absolute()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o711)
        self.environment = environment or SandboxEnvironment.current_python()
        # Copy mode is the non-root fallback; mode="copy" forces it as root too (tests of that fallback).
        self.overlay, self.copy_reason = features.overlay_decision(mode)
        # As root, every sandbox joins one user namespace made here, in which the agent's uid 1000 maps
        # to an unprivileged host user, never to host root (whose /proc/sys and /dev nodes it would own).
        self.agent_uid: int | None = AGENT_HOST_UID if self.overlay else None
        self.userns_fd: int | None = None
        if self.overlay:
            self.userns_fd = make_user_namespace(AGENT_UID, AGENT_HOST_UID)
        self.layers = LayerStore(self.root, owner=self.agent_uid)
        self.home = reaper.sandbox_home(self.root)
        self.seccomp_program = seccomp.build_filter()
        self.plan = RootPlan.build(self.environment)
        self._runtimes: dict[str, tuple[SandboxEnvironment, RootPlan]] = {}
        self._images: dict[str, ImageRuntime] = {}
        self.image_store: ImageStore | None = image_store
        self.image_pins: dict[str, str] = {}
        """Reference -> digest, set by whoever resolved the reference elsewhere (a Ray node: the driver's
        resolution), so a tag is never resolved again in this store."""
        self.server_kind, self.server = install_server(self.root, server or features.exec_server_choice())
        # Network namespaces made ahead of time; the C server's launcher enters them (as root only).
        self.netns: NetnsPool | None = NetnsPool() if self.overlay and self.server_kind == "c" else None
        self.reap_stale()
        reaper.ensure_watchdog(self.root)
        prefork = default_prefork() if prefork is None else prefork
        if prefork < 0:
            raise SandboxError(
                f"prefork {prefork} is negative: give the sandboxes to keep started per shape (0: off)"
            )
        self.prefork: PreforkPool | None = PreforkPool(self, prefork) if prefork and self.overlay else None

    @property
    def mode(self) -> str:
        return "overlay" if self.overlay else "copy"

    @property
    def snapshots(self) -> dict[str, tuple[Path, ...]]:
        """Snapshot id -> layer stack (newest first) of every snapshot this process recorded."""
        out: dict[str, tuple[Path, ...]] = {}
        d = self.layers.records / str(os.getpid())
        for rec in d.iterdir() if d.is_dir() else ():
            snap = self.layers.load(rec.name)
            if snap is not None:
                out[snap.id] = snap.layers
        return out

    def runtime_for(self, spec: SandboxSpec) -> tuple[SandboxEnvironment, RootPlan]:
        """The Python environment a sandbox of ``spec`` runs and its root plan: the spec's layer
        (planned once per layer digest), or the backend's own environment when the spec names none."""
        image = self.image_for(spec)
        if image is not None:  # the image is the whole environment: its own Python, not a host layer
            return image.environment, image.plan
        ref = spec.environment
        if ref is None:
            return self.environment, self.plan
        found = self._runtimes.get(ref.digest)
        if found is None:
            if not (Path(ref.path) / "bin" / "python").exists():
                raise SandboxError(
                    f"environment layer {ref.path} has no bin/python: rebuild it (sparring tasks check builds it)"
                )
            env = SandboxEnvironment.of_layer(Path(ref.path))
            found = self._runtimes[ref.digest] = (env, RootPlan.build(env))
        return found

    def image_for(self, spec: SandboxSpec) -> ImageRuntime | None:
        """The image root a sandbox of ``spec`` runs on (None: the host's), from the image store;
        resolved once per reference, its root unpacked once per image (sparring.images.store)."""
        if spec.image is None:
            return None
        target = self.image_pins.get(spec.image, spec.image)
        found = self._images.get(target)
        if found is None:
            from sparring.images.store import ImageStore

            if self.image_store is None:
                self.image_store = ImageStore()
            rec = self.image_store.resolve(target)
            if rec is None:
                raise SandboxError(
                    f"the sandbox needs image {spec.image!r}, which is not in the image store "
                    f"{self.image_store.root}: sparring image pull {spec.image} (or image import / build), "
                    "or run it with the OCI backend (--backend oci)"
                )
            root = self.image_store.rootfs(rec)
            env = SandboxEnvironment.of_image(root, rec.config.env)
            if self.server_kind == "c" and self.server.name.endswith(STATIC_SUFFIX):
                server = ("c", self.server)
            else:  # a dynamic C server needs the host's libc: the image's own Python runs the server
                server = install_server(self.root, "python")
            found = self._images[target] = ImageRuntime(
                digest=rec.digest, root=root, environment=env, plan=RootPlan.for_image(),
                working_dir=rec.working_dir, server_kind=server[0], server=server[1],
            )  # fmt: skip
        return found

    def lower_for(self, spec: SandboxSpec) -> Path | None:
        """The read-only lowest layer: the workspace imported into the layer store (owned by the agent
        user, so it can edit its files), verified against the pinned digest when the spec has one."""
        if spec.workspace is None:
            return None
        ws = Path(spec.workspace)
        if not ws.is_dir():
            raise SandboxError(f"workspace {ws} is not a directory: pass an existing task workspace")
        if spec.workspace_digest is None and not self.overlay:
            return ws  # copy mode copies it anyway
        return self.layers.import_workspace(ws, spec.workspace_digest)

    async def create(self, spec: SandboxSpec, snapshot: str | None = None) -> LocalSandbox:
        snap: Snapshot | None = None
        if snapshot is not None:
            snap = self.layers.load(snapshot)
            if snap is None:
                raise SandboxError(f"unknown snapshot {snapshot!r}: take one with sandbox.snapshot() first")
        for dest in (*spec.extra_ro, *spec.extra_rw):
            if not dest.startswith("/") or any(
                dest == w or dest.startswith(w + "/") for w in (WORKSPACE, *WRITABLE)
            ):
                raise SandboxError(
                    f"extra mount {dest!r} must be an absolute path outside /workspace, /tmp and {HOME}"
                )
        image = self.image_for(spec)
        if image is not None:
            missing = [
                d for d in (*spec.extra_ro, *spec.extra_rw) if not (image.root / d.lstrip("/")).is_dir()
            ]
            if missing:
                raise SandboxError(
                    f"image {spec.image} has no directory {missing[0]} to mount onto (its root is read-only): "
                    "mount under /judge, /run/sparring or another directory the image has"
                )
        check_alias(spec, image.root if image is not None else None)
        lower = self.lower_for(spec)
        if snap is not None and snap.base != str(lower):
            raise SandboxError(
                f"snapshot {snapshot} was taken on another workspace ({snap.base}), not {lower}"
            )
        layers = snap.layers if snap else ()
        if self.prefork is not None:
            warm = await self.prefork.take(spec, lower, layers)
            if warm is not None:
                return warm
        return await self._cold(spec, lower, layers, workspace=True)

    async def _cold(
        self, spec: SandboxSpec, lower: Path | None, layers: tuple[Path, ...], workspace: bool
    ) -> LocalSandbox:
        """Make and start a sandbox the whole way (``workspace=False``: all but /workspace, for prefork)."""
        sb = LocalSandbox(self, spec, lower, layers=layers)
        try:
            await sb._start(workspace=workspace)
        except BaseException:
            await sb._teardown()
            raise
        return sb

    async def aclose(self) -> None:
        """Close the pre-started sandboxes (the watchdog would reap them when this process dies)."""
        if self.prefork is not None:
            await self.prefork.close()

    async def fork(self, snapshot: str, spec: SandboxSpec, n: int) -> list[LocalSandbox]:
        """``n`` new sandboxes seeded from one snapshot (a group of rollouts forked at step k)."""
        made = await asyncio.gather(
            *(self.create(spec, snapshot=snapshot) for _ in range(n)), return_exceptions=True
        )
        ok = [s for s in made if isinstance(s, LocalSandbox)]
        errors = [e for e in made if isinstance(e, BaseException)]
        if errors:
            for s in ok:
                await s.close()
            raise errors[0]
        return ok

    def reap_stale(self) -> int:
        """Remove sandboxes and snapshot layers whose owning process is dead."""
        return reaper.reap(self.root)
