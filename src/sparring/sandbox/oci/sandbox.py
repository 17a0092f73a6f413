"""Host side: one sandbox of the OCI backend, a podman container and the directories that serve it.

:class:`OCISandbox` makes its sandbox directory, mounts and cgroups, starts the container (podman.py),
runs commands through the exec server inside it (support.py holds the scripts; each exec is a few files
and FIFOs under ctl/x/ and a pids cgroup of its own), takes diffs and snapshots of the workspace with the
container frozen, and resets it: the kill, the scratch places and the check that retires a bent
sandbox are reset.py's. The layout and the reasons for it are in backend.py's docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from sparring.errors import SandboxError
from sparring.images.runtime import python_alias
from sparring.sandbox.base import OUTPUT_CAP, WORKSPACE, ExecResult, SandboxSpec, WorkspaceDiff
from sparring.sandbox.environment import SandboxEnvironment
from sparring.sandbox.isolation import mounts
from sparring.sandbox.isolation.cgroups import cgroup_procs, rmdir_tree
from sparring.sandbox.isolation.hostfiles import HostFiles
from sparring.sandbox.isolation.init_state import InitState
from sparring.sandbox.oci import podman, scratch
from sparring.sandbox.oci.reset import (
    as_born,
    check_fresh,
    clear_scratch,
    container_pids,
    find_residents,
    kill_commands,
    survivors,
)
from sparring.sandbox.oci.support import (
    BASE_ENV,
    CG_PREFIX,
    CGROUP_ROOT,
    NOBODY,
    SERVER_SH,
    Sink,
    cg_dirs,
    command_script,
    kill_tree,
    remove_cgroups,
    tree_empty,
)
from sparring.sandbox.storage.layers import copy_tree, discard
from sparring.sandbox.storage.workspace import diff_caps, tree_diff

if TYPE_CHECKING:
    from sparring.sandbox.oci.backend import OCIBackend

MS_BIND, MS_PRIVATE, MS_SHARED = 4096, 1 << 18, 1 << 20


def teardown_dir(podman_cmd: list[str], d: Path) -> None:
    """Remove the container, mounts, cgroups and directory of sandbox dir ``d`` (idempotent)."""
    with contextlib.suppress(OSError):
        cid = (d / "cid").read_text().strip()
        if cid:
            podman.remove(podman_cmd, cid)
    for mp in mounts.mounts_below(d):
        with contextlib.suppress(SandboxError):
            mounts.umount(mp)
    remove_cgroups(d.name.removeprefix("oci-"))
    discard(d)


class OCISandbox(HostFiles):
    """One sandbox of the OCI backend. Use ``await backend.create(spec)``."""

    def __init__(
        self, backend: OCIBackend, spec: SandboxSpec, image: str, layers: tuple[Path, ...] = ()
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.image = image
        self.id = uuid.uuid4().hex[:12]
        self.dir = backend.root / f"oci-{self.id}"
        self.ws = self.dir / "ws"
        self.ctl = self.dir / "ctl"
        self.layers = layers
        self.cid = ""
        self.closed = False
        self._seq = itertools.count(1)
        self._req_fd = -1
        self._xfd = -1
        self._pids_parent = backend.pids_root / (CG_PREFIX + self.id) if backend.pids_root else None
        self._exec_cg = self._pids_parent / "exec" if self._pids_parent else None
        self._empty = self.dir / "empty"
        self._cg_parents: list[Path] = []  # the sandbox's cgroup in every hierarchy (once the container runs)
        self.retired = ""  # why the host retired it (its exec server bent or processes left), else ""
        self.init_pid = self.server_pid = 0  # host pids of podman's init and of the exec server
        self.born: dict[int, InitState] = {}  # their state at create, checked after every reset
        self._scratch: scratch.Listing = {}  # /tmp, /run, /dev... at create, restored at every reset
        self.environment: SandboxEnvironment | None = None
        """A task image's environment (its config's ``Env`` and PATH, /.sparring/bin last), as the local
        backend's image sandboxes have it; None on the default image (the spec's layer, if any)."""

    # ---------- lifecycle (blocking parts run in a thread) ----------
    @property
    def lower(self) -> Path:
        return Path(self.spec.workspace) if self.spec.workspace else self._empty

    def _setup(self) -> None:
        s = self.spec
        self.dir.mkdir(mode=0o700)
        (self.dir / "owner").write_text(str(os.getpid()))
        self._empty.mkdir()
        self.ws.mkdir()
        mounts.mount(str(self.ws), self.ws, "none", flags=MS_BIND)
        # A peer group of its own (the parent mount may be shared), then shared with the container.
        mounts.mount("none", self.ws, "none", flags=MS_PRIVATE)
        mounts.mount("none", self.ws, "none", flags=MS_SHARED)
        (self.ctl / "x").mkdir(parents=True)
        owned = [self.ctl, self.ctl / "x"]
        if s.image is not None:  # /.sparring/bin: `python` where a task's image has only python3
            (self.ctl / "bin").mkdir()
            owned.append(self.ctl / "bin")
        # The host touches per-exec files only through this descriptor, exclusively and without
        # following links (defence in depth: commands cannot write x/, see below).
        self._xfd = os.open(self.ctl / "x", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        (self.ctl / "server.sh").write_text(SERVER_SH)
        os.mkfifo(self.ctl / "req", 0o600)
        self._req_fd = os.open(self.ctl / "req", os.O_RDWR | os.O_NONBLOCK)
        # Commands are (capability-less) uid 0: owned by nobody and read-only to others, ctl/ and x/
        # take no new, renamed or removed entry from inside, and the server's script and request FIFO
        # no write; the per-exec files the host makes there stay root's, the server's to open.
        for f, mode in (*((d, 0o755) for d in owned), (self.ctl / "server.sh", 0o444),
                        (self.ctl / "req", 0o444)):  # fmt: skip
            os.chown(f, NOBODY, NOBODY)
            os.chmod(f, mode)
        assert self._pids_parent is not None and self._exec_cg is not None
        self._exec_cg.mkdir(parents=True)
        # Commands run as (capability-less) uid 0: give exec/ to nobody so they can neither join it
        # nor create cgroups beside their own; a per-exec cgroup stays theirs to join.
        for f in [self._exec_cg, *self._exec_cg.iterdir()]:
            os.chown(f, NOBODY, NOBODY)
        if s.pids is not None:
            (self._pids_parent / "pids.max").write_text(str(s.pids))
        # A task's image runs by podman's id of it, the image whose config the commands get.
        facts = self.backend.image_facts(self.image) if s.image is not None else None
        run_image = facts.id if facts is not None else self.image
        argv = podman.run_argv(self.backend, self.id, self.dir, self._exec_cg, s, run_image)
        self.cid = podman.start(argv, self.dir, self.image)
        (self.dir / "cid").write_text(self.cid)
        self.init_pid, self.server_pid = find_residents(self._members, self.id)
        if facts is not None:
            self._image_environment(facts.config.env, facts.config.path)
        self.born = {p: InitState.read(p) for p in (self.init_pid, self.server_pid)}
        self._scratch = scratch.listing(self.server_pid)
        # Mount the layers only now: the container's /workspace is a slave of ws/ and receives it.
        self._mount_layers()

    def _image_environment(self, image_env: dict[str, str], path: str) -> None:
        """The task image's environment, read (as the local backend reads its unpacked root) through
        the container's root as its init sees it, before any command runs: the image's ``Env``, its
        PATH with /.sparring/bin last, and there a ``python`` to the image's python3 where its PATH has
        no ``python``. The link is the host's, in ctl/bin/, which is nobody's and read-only to the
        commands (capability-less uid 0), so no command can change what ``python`` runs."""
        root = Path(f"/proc/{self.init_pid}/root")
        self.environment = SandboxEnvironment.of_image(root, image_env)
        alias = python_alias(root, path)
        if alias is not None:
            link = self.ctl / "bin" / "python"
            os.symlink(alias, link)
            os.lchown(link, NOBODY, NOBODY)

    def _members(self) -> list[int]:
        """Every process of the container, read from the host (reset.py)."""
        if not self._cg_parents:
            self._cg_parents = cg_dirs(CG_PREFIX + self.id)
        assert self._exec_cg is not None
        return container_pids(self._cg_parents, self.cid, self._exec_cg)

    def _ctrl_dir(self, controller: str) -> Path:
        v1 = CGROUP_ROOT / controller / f"{CG_PREFIX}{self.id}" / f"libpod-{self.cid}"
        return v1 if v1.is_dir() else CGROUP_ROOT / f"{CG_PREFIX}{self.id}" / f"libpod-{self.cid}"

    def _mount_layers(self) -> None:
        rw = self.dir / "rw"
        rw.mkdir(exist_ok=True)
        mounts.mount("tmpfs", rw, "tmpfs", f"size={self.spec.disk_mb}m,mode=0755")
        (rw / "upper").mkdir()
        (rw / "work").mkdir()
        lowers = ":".join(str(p) for p in (*self.layers, self.lower))
        mounts.mount(
            "overlay", self.ws, "overlay", f"lowerdir={lowers},upperdir={rw}/upper,workdir={rw}/work"
        )

    def _unmount_layers(self) -> None:
        mounts.umount(self.ws)  # the overlay on top of the shared ws/ mount (propagates)
        mounts.umount(self.dir / "rw")

    def _teardown(self) -> None:
        for fd in (self._req_fd, self._xfd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._req_fd = self._xfd = -1
        teardown_dir(self.backend.podman, self.dir)

    def _alive(self) -> bool:
        return bool(self.cid) and bool(cgroup_procs(self._ctrl_dir("pids")))

    @property
    def reusable(self) -> bool:
        """Whether ``reset`` returns everything writable to its initial state: not a spec's extra_rw
        mounts (host directories reset never touches), so a pool closes such a sandbox instead."""
        return not self.spec.extra_rw

    @property
    def healthy(self) -> bool:
        """Open, not retired, its exec server and init alive and as they were born (a pool hands out
        only a healthy sandbox; this reads their state from the host, a few syscalls)."""
        if self.closed or self.retired:
            return False
        return as_born(self.born)

    # ---------- exec ----------
    async def exec(
        self,
        cmd: list[str] | str,
        timeout: float = 30.0,
        env: dict[str, str] | None = None,
        cwd: str = WORKSPACE,
        stdin: bytes | None = None,
    ) -> ExecResult:
        if self.closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise SandboxError("empty command")
        full_env = dict(BASE_ENV, PYTHONHASHSEED=str(self.spec.seed))
        if self.environment is not None:  # a task's image: its own Python and config, as on the local backend
            full_env["PATH"] = ":".join(self.environment.path_dirs)
            full_env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            full_env.update(self.environment.variables)
        elif self.spec.environment is not None:
            layer = SandboxEnvironment.of_layer(Path(self.spec.environment.path))
            full_env["PATH"] = ":".join(layer.path_dirs)
            full_env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        full_env.update(self.spec.env)
        full_env.update(env or {})
        n = next(self._seq)
        assert self._exec_cg is not None
        cg = self._exec_cg / f"x{n}"
        loop = asyncio.get_running_loop()
        fds: list[int] = []
        t0 = time.perf_counter()
        try:
            cg.mkdir()
            self._unlink_exec_files(n)  # anything planted under the coming names
            for suffix in ("ev", "out", "err"):
                os.mkfifo(f"{n}.{suffix}", 0o600, dir_fd=self._xfd)
                fds.append(
                    os.open(f"{n}.{suffix}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=self._xfd)
                )
            if stdin is not None:
                self._write_exec_file(f"{n}.in", stdin)
            self._write_exec_file(f"{n}.sh", command_script(argv, full_env, cwd).encode())
        except OSError as e:
            for fd in fds:
                os.close(fd)
            self._cleanup_exec(n, cg)
            raise SandboxError(f"cannot prepare exec in sandbox {self.id}: {e}") from None
        got_rc: asyncio.Future[int] = loop.create_future()
        ev: Sink

        def on_event() -> None:
            for line in bytes(ev.buf).decode(errors="replace").splitlines():
                if line.startswith("rc ") and not got_rc.done():
                    with contextlib.suppress(ValueError):
                        got_rc.set_result(int(line[3:]))

        ev = Sink(loop, fds[0], 4096, on_event)
        out = Sink(loop, fds[1], OUTPUT_CAP)
        err = Sink(loop, fds[2], OUTPUT_CAP)
        oom_before = self._oom_kills()
        timed_out = False
        try:
            os.write(self._req_fd, f"{n}\n".encode())
            rc = await self._wait_rc(got_rc, loop.time() + timeout)
            if rc is None:
                timed_out = True
                await asyncio.to_thread(kill_tree, cg)
                rc = await self._wait_rc(got_rc, loop.time() + 10)
                if rc is None:
                    raise SandboxError(f"the exec server of sandbox {self.id} does not answer: close it")
            # Output written before exit is already in the pipes; a background process that
            # keeps stdout open must not hold the call: wait for EOF only briefly.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(out.eof, err.eof), 0.2)
        finally:
            if not got_rc.done():  # cancelled or failed: the command must not run on unseen
                kill_tree(cg)
            for s in (ev, out, err):
                s.close()
            self._cleanup_exec(n, cg)
        duration = (time.perf_counter() - t0) * 1000
        oom = self._oom_kills() > oom_before
        stderr = err.text()
        code = 124 if timed_out else rc
        if code == 125 and stderr.startswith(("sparring: cannot chdir", "sparring: cannot join")):
            raise SandboxError(f"{stderr.strip().splitlines()[0]} in sandbox {self.id}")
        if code == 127 and stderr.startswith("env: can't execute"):
            stderr = f"sparring: command not found in sandbox: {argv[0]}\n"
        if oom and code == 0:
            code = 137
        return ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=stderr,
            timed_out=timed_out,
            oom_killed=oom,
            duration_ms=duration,
            truncated=bool(out.dropped or err.dropped),
        )

    async def _wait_rc(self, got_rc: asyncio.Future[int], deadline: float) -> int | None:
        """The command's exit status, or None at ``deadline``; checks every second that the container lives."""
        loop = asyncio.get_running_loop()
        while (left := deadline - loop.time()) > 0:
            try:
                return await asyncio.wait_for(asyncio.shield(got_rc), min(left, 1.0))
            except TimeoutError:
                if not got_rc.done() and not self._alive():
                    raise SandboxError(
                        f"the container of sandbox {self.id} is gone (killed from outside?): close it and create another"
                    ) from None
        return None

    def _write_exec_file(self, name: str, data: bytes) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self._xfd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    def _unlink_exec_files(self, n: int) -> None:
        for suffix in ("ev", "out", "err", "in", "sh"):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                os.unlink(f"{n}.{suffix}", dir_fd=self._xfd)

    def _cleanup_exec(self, n: int, cg: Path) -> None:
        if self._xfd >= 0:
            self._unlink_exec_files(n)
        # Processes the command left running in the background stay in its cgroup; keep it then.
        if cg.is_dir() and tree_empty(cg):
            rmdir_tree(cg)

    def _oom_kills(self) -> int:
        d = self._ctrl_dir("memory")
        try:
            for line in (d / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
            for line in (d / "memory.events").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    async def diff(self) -> WorkspaceDiff:
        self._check_open()

        def frozen_diff() -> WorkspaceDiff:
            # Frozen, no process inside can swap a file for a symlink while the host reads it.
            self._freeze("FROZEN")
            try:
                return tree_diff(self.lower, self.ws, *diff_caps(self.spec.disk_mb))
            finally:
                self._freeze("THAWED")

        return await asyncio.to_thread(frozen_diff)

    # ---------- layers ----------
    def _freeze(self, state: str) -> None:
        f = self._ctrl_dir("freezer") / "freezer.state"
        if not f.is_file():
            return
        f.write_text(state)
        for _ in range(500):
            if f.read_text().strip() == state:
                return
            time.sleep(0.001)

    async def snapshot(self) -> str:
        self._check_open()

        def take() -> str:
            sid, d = self.backend.new_layer_dir()
            self._freeze("FROZEN")
            try:
                # iterative, no link followed, sparse files kept sparse, opaque marks and whiteouts kept;
                # beyond the quota (apparent sizes) a WorkspaceFault, and nothing of it stays
                d.parent.mkdir(parents=True, exist_ok=True)
                try:
                    copy_tree(self.dir / "rw" / "upper", d, max_bytes=self.spec.disk_mb << 20)
                except BaseException:
                    discard(d)
                    raise
                stack = (d, *self.layers)
                self.backend.snapshots[sid] = stack
                self._unmount_layers()
                self.layers = stack
                self._mount_layers()
            finally:
                self._freeze("THAWED")
            return sid

        return await asyncio.to_thread(take)

    async def restore(self, snapshot_id: str) -> None:
        self._check_open()
        if snapshot_id not in self.backend.snapshots:
            raise SandboxError(f"unknown snapshot {snapshot_id!r}: take one with sandbox.snapshot() first")
        await self._remount(self.backend.snapshots[snapshot_id])

    async def reset(self) -> None:
        self._check_open()
        await self._remount(())

    async def _remount(self, layers: tuple[Path, ...]) -> None:
        def go() -> str:
            assert self._exec_cg is not None
            keep = (self.init_pid, self.server_pid)
            left = kill_commands(self._members, keep, self._req_fd, self._exec_cg)
            if left:
                return survivors(left)
            why = clear_scratch(self.server_pid, self._scratch)
            if why:
                return why
            self._unmount_layers()
            self.layers = layers
            self._mount_layers()
            return check_fresh(self._members(), self.born, self.init_pid, self.server_pid)

        why = await asyncio.to_thread(go)
        if why:
            await self._retire(why)

    async def _retire(self, why: str) -> None:
        """Close the sandbox for good and raise: a pool replaces it."""
        self.retired = why
        await self.close()
        raise SandboxError(f"sandbox {self.id}: retired: {why}; it was closed")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await asyncio.to_thread(self._teardown)

    async def __aenter__(self) -> OCISandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
