"""Local sandbox backend: bubblewrap + overlayfs + tmpfs quota + cgroups.

Layout of one sandbox under the backend root::

    <root>/sb-<id>/
        owner          pid of the owning process (the reaper removes orphans)
        rw/            tmpfs of size disk_mb (the disk quota) holding upper/ and work/
        merged/        overlayfs: upper over [snapshot layers...] over the task workspace
        etc/           synthetic passwd/group bound read-only into the sandbox

Every ``exec`` runs one bubblewrap process with all namespaces unshared (user,
pid, net, ipc, uts, cgroup), capabilities dropped, as uid 1000, with the
merged view at /workspace. A timeout kills bubblewrap's process group; as the
pid namespace's init dies with it, the kernel kills every process inside, so
nothing outlives its command.

``reset()`` remounts a fresh tmpfs (discarding the upper layer), ``snapshot()``
freezes the upper layer as a new read-only layer and ``restore()`` remounts any
stack of layers. Without root (no mount rights) the backend falls back to
*copy mode*: the workspace is copied instead of overlaid and no disk quota is
enforced; isolation by bubblewrap is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

from sparring.errors import SandboxError, SandboxUnavailableError
from sparring.sandbox import mounts, seccomp
from sparring.sandbox.base import WORKSPACE, ExecResult, SandboxSpec, WorkspaceDiff
from sparring.sandbox.cgroups import CgroupSet
from sparring.sandbox.environment import (
    AGENT_GID,
    AGENT_UID,
    GROUP,
    HOSTNAME,
    PASSWD,
    SandboxEnvironment,
    host_usr_binds,
)
from sparring.sandbox.workspace import tree_diff

OUTPUT_CAP = 1 << 20  # bytes kept per stream; the rest is counted and dropped
TRUNC_MARKER = "\n[... output truncated by sparring: {n} more bytes ...]\n"
_JOIN_CGROUPS = (
    'IFS=:; for f in $SPARRING_CG; do echo $$ > "$f" 2>/dev/null || '
    '{ echo "sparring: cannot join cgroup $f" >&2; exit 125; }; done; unset SPARRING_CG; exec "$@"'
)
DEFAULT_ROOT = Path(os.environ.get("SPARRING_SANDBOX_ROOT", "/tmp/sparring-sandboxes"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphaned(owner: int) -> bool:
    """True when ``owner`` (a pid, -1 if unknown) is neither this process nor alive."""
    return owner != os.getpid() and not (owner > 0 and _pid_alive(owner))


async def _drain(stream: asyncio.StreamReader | None, cap: int) -> tuple[bytes, int]:
    """Read a stream to EOF keeping the first ``cap`` bytes; returns (kept, dropped)."""
    if stream is None:
        return b"", 0
    buf = bytearray()
    dropped = 0
    while chunk := await stream.read(65536):
        room = cap - len(buf)
        if room > 0:
            buf += chunk[:room]
        dropped += max(0, len(chunk) - max(room, 0))
    return bytes(buf), dropped


def _decode(data: bytes, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + TRUNC_MARKER.format(n=dropped) if dropped else text


class LocalBackend:
    """Creates :class:`LocalSandbox` es and owns the snapshot layer store."""

    name = "local"

    def __init__(self, root: Path | None = None, environment: SandboxEnvironment | None = None) -> None:
        self.bwrap = shutil.which("bwrap")
        if self.bwrap is None:
            raise SandboxUnavailableError(
                "bubblewrap (bwrap) is not installed: run `make setup` as root or `apt-get install bubblewrap`"
            )
        self.root = Path(root or DEFAULT_ROOT)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.root / "layers").mkdir(exist_ok=True)
        self.environment = environment or SandboxEnvironment.current_python()
        self.overlay = os.geteuid() == 0 and mounts.overlay_supported()
        # snapshot id -> layer stack (newest first), task workspace excluded
        self.snapshots: dict[str, tuple[Path, ...]] = {}
        self.reap_stale()

    @property
    def mode(self) -> str:
        return "overlay" if self.overlay else "copy"

    async def create(self, spec: SandboxSpec, snapshot: str | None = None) -> LocalSandbox:
        if snapshot is not None and snapshot not in self.snapshots:
            raise SandboxError(f"unknown snapshot {snapshot!r}: take one with sandbox.snapshot() first")
        if spec.workspace is not None and not Path(spec.workspace).is_dir():
            raise SandboxError(f"workspace {spec.workspace} is not a directory")
        sb = LocalSandbox(self, spec, layers=self.snapshots.get(snapshot or "", ()))
        try:
            await asyncio.to_thread(sb._setup)
        except BaseException:
            await asyncio.to_thread(sb._teardown)
            raise
        return sb

    def reap_stale(self) -> int:
        """Remove sandboxes whose owning process is dead (a crashed pool leaves no mounts behind)."""
        n = 0
        for d in self.root.glob("sb-*"):
            try:
                owner = int((d / "owner").read_text())
            except (OSError, ValueError):
                owner = -1
            if not _orphaned(owner):
                continue
            for mp in mounts.mounts_below(d):
                mounts.umount(mp)
            shutil.rmtree(d, ignore_errors=True)
            n += 1
        for layer in (self.root / "layers").glob("snap-*"):
            parts = layer.name.split("-")
            owner = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1
            if _orphaned(owner):
                shutil.rmtree(layer, ignore_errors=True)
        return n

    def new_layer_dir(self) -> tuple[str, Path]:
        # The owner's pid is in the name so the reaper can drop layers of a dead backend.
        sid = f"snap-{os.getpid()}-{uuid.uuid4().hex[:16]}"
        d = self.root / "layers" / sid
        return sid, d


class LocalSandbox:
    """One sandbox of the local backend. Use ``await backend.create(spec)``."""

    def __init__(self, backend: LocalBackend, spec: SandboxSpec, layers: tuple[Path, ...] = ()) -> None:
        self.backend = backend
        self.spec = spec
        self.id = uuid.uuid4().hex[:12]
        self.dir = backend.root / f"sb-{self.id}"
        self.merged = self.dir / "merged"
        self.layers = layers
        self.cg = CgroupSet(self.id)
        self.closed = False
        self._empty = self.dir / "empty"

    # ---------- lifecycle (blocking parts run in a thread) ----------
    def _setup(self) -> None:
        self.dir.mkdir(mode=0o700)
        (self.dir / "owner").write_text(str(os.getpid()))
        etc = self.dir / "etc"
        etc.mkdir()
        (etc / "passwd").write_text(PASSWD)
        (etc / "group").write_text(GROUP)
        (etc / "hostname").write_text(HOSTNAME + "\n")
        self._empty.mkdir()
        self.merged.mkdir()
        self._mount_layers()
        s = self.spec
        self.cg = CgroupSet.create(f"{self.id}", s.memory_mb, s.pids, s.cpus)

    @property
    def lower(self) -> Path:
        return Path(self.spec.workspace) if self.spec.workspace else self._empty

    def _mount_layers(self) -> None:
        if not self.backend.overlay:
            shutil.rmtree(self.merged, ignore_errors=True)
            src = self.layers[0] if self.layers else self.lower
            shutil.copytree(src, self.merged, symlinks=True)
            return
        rw = self.dir / "rw"
        rw.mkdir(exist_ok=True)
        mounts.mount("tmpfs", rw, "tmpfs", f"size={self.spec.disk_mb}m,mode=0755")
        (rw / "upper").mkdir()
        (rw / "work").mkdir()
        lowers = ":".join(str(p) for p in (*self.layers, self.lower))
        mounts.mount("overlay", self.merged, "overlay", f"lowerdir={lowers},upperdir={rw}/upper,workdir={rw}/work")

    def _unmount_layers(self) -> None:
        if self.backend.overlay:
            mounts.umount(self.merged)
            mounts.umount(self.dir / "rw")

    def _teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.cg.destroy()
        if self.dir.exists():
            for mp in mounts.mounts_below(self.dir):
                with contextlib.suppress(SandboxError):
                    mounts.umount(mp)
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---------- exec ----------
    def _argv(self, cmd: list[str], env: dict[str, str], cwd: str) -> list[str]:
        s = self.spec
        a: list[str] = [self.backend.bwrap or "bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
        a += ["--cap-drop", "ALL", "--uid", str(AGENT_UID), "--gid", str(AGENT_GID), "--hostname", HOSTNAME]
        a += host_usr_binds()
        etc = self.dir / "etc"
        for name in ("passwd", "group", "hostname"):
            a += ["--ro-bind", str(etc / name), f"/etc/{name}"]
        # tmpfs first: an environment living under /tmp (a venv in a clone there) is bound on top of it.
        a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/home/agent"]
        for p in self.backend.environment.ro_paths:
            a += ["--ro-bind", str(p), str(p)]
        a += ["--bind", str(self.merged), WORKSPACE]
        for dest, src in sorted(s.extra_ro.items()):
            a += ["--ro-bind", str(src), dest]
        for dest, src in sorted(s.extra_rw.items()):
            a += ["--bind", str(src), dest]
        a += ["--clearenv"]
        for k, v in sorted(env.items()):
            a += ["--setenv", k, v]
        a += ["--chdir", cwd, "--"]
        return a + cmd

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
        argv_cmd = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv_cmd:
            raise SandboxError("empty command")
        full_env = self.backend.environment.base_env(self.spec.seed)
        full_env.update(self.spec.env)
        full_env.update(env or {})
        argv = self._argv(argv_cmd, full_env, cwd)
        sc_args, sc_fd = seccomp.bwrap_args()  # bubblewrap installs the filter just before the command
        argv[1:1] = sc_args
        oom_before = self.cg.oom_kills()
        t0 = time.perf_counter()
        spawn_env = None
        if self.cg.dirs:
            # Join the cgroups from a tiny shell that then execs bubblewrap: nothing runs
            # outside the limits, and unlike a preexec_fn it keeps the fast vfork spawn path.
            argv = ["/bin/sh", "-c", _JOIN_CGROUPS, "sparring-join", *argv]
            spawn_env = {"PATH": "/usr/bin:/bin", "SPARRING_CG": ":".join(map(str, self.cg.procs_files()))}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=spawn_env,
                pass_fds=(sc_fd,),
            )
        except OSError as e:
            raise SandboxError(f"could not start bubblewrap: {e}") from None
        finally:
            seccomp.close_fd(sc_fd)
        out_t = asyncio.ensure_future(_drain(proc.stdout, OUTPUT_CAP))
        err_t = asyncio.ensure_future(_drain(proc.stderr, OUTPUT_CAP))
        timed_out = False
        try:
            if stdin is not None and proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    proc.stdin.write(stdin)
                    await proc.stdin.drain()
                proc.stdin.close()
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            timed_out = True
        finally:
            if proc.returncode is None:
                self._kill(proc.pid)
                await proc.wait()
        (out, out_drop), (err, err_drop) = await asyncio.gather(out_t, err_t)
        duration = (time.perf_counter() - t0) * 1000
        oom = self.cg.oom_kills() > oom_before
        rc = proc.returncode if proc.returncode is not None else -9
        code = 124 if timed_out else (rc if rc >= 0 else 128 - rc)
        stderr = _decode(err, err_drop)
        if code == 125 and stderr.startswith("sparring: cannot join cgroup"):
            raise SandboxError(stderr.strip().splitlines()[0])
        if code == 1 and stderr.startswith("bwrap: execvp "):
            code = 127
            stderr = f"sparring: command not found in sandbox: {argv_cmd[0]}\n"
        elif stderr.startswith("bwrap: ") and "execvp" not in stderr and not timed_out:
            raise SandboxError(f"bubblewrap failed: {stderr.strip().splitlines()[0]}")
        if oom and code == 0:
            code = 137
        return ExecResult(
            exit_code=code,
            stdout=_decode(out, out_drop),
            stderr=stderr,
            timed_out=timed_out,
            oom_killed=oom,
            duration_ms=duration,
            truncated=bool(out_drop or err_drop),
        )

    def _kill(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        for p in self.cg.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)

    # ---------- files (host side, never following a symlink) ----------
    def _rel(self, path: str) -> str | None:
        """Path relative to /workspace, or None when it lies outside it."""
        if not path.startswith("/"):
            return path
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            return path[len(WORKSPACE) :].lstrip("/")
        return None

    async def read_file(self, path: str) -> bytes:
        rel = self._rel(path)
        if rel is None:
            r = await self.exec(["cat", "--", path], timeout=10)
            if r.exit_code != 0:
                raise FileNotFoundError(2, r.stderr.strip() or "cannot read", path)
            return r.stdout.encode()
        fd = mounts.open_beneath(self.merged, rel, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    async def write_file(self, path: str, content: bytes) -> None:
        rel = self._rel(path)
        if rel is None:
            raise SandboxError(f"can only write under {WORKSPACE}: {path}")
        try:
            fd = mounts.open_beneath(
                self.merged, rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, make_parents=True
            )
        except OSError as e:
            if e.errno == 28:  # ENOSPC: the disk quota
                raise OSError(28, "disk quota of the sandbox exceeded", path) from None
            raise
        with os.fdopen(fd, "wb") as f:
            f.write(content)

    async def delete_file(self, path: str) -> None:
        rel = self._rel(path)
        if rel is None:
            raise SandboxError(f"can only delete under {WORKSPACE}: {path}")
        parts = mounts.split_beneath(rel)
        parent = "/".join(parts[:-1])
        fd = mounts.open_beneath(self.merged, parent, os.O_RDONLY | os.O_DIRECTORY) if parent else os.open(
            self.merged, os.O_RDONLY | os.O_DIRECTORY
        )
        try:
            os.unlink(parts[-1], dir_fd=fd)
        finally:
            os.close(fd)

    async def list_dir(self, path: str = WORKSPACE) -> list[str]:
        rel = self._rel(path)
        if rel is None:
            r = await self.exec(["ls", "-1A", "--", path], timeout=10)
            if r.exit_code != 0:
                raise FileNotFoundError(2, r.stderr.strip() or "cannot list", path)
            return r.stdout.split()
        fd = (
            mounts.open_beneath(self.merged, rel, os.O_RDONLY | os.O_DIRECTORY)
            if mounts.split_beneath(rel)
            else os.open(self.merged, os.O_RDONLY | os.O_DIRECTORY)
        )
        try:
            out = []
            for e in os.scandir(fd):
                out.append(e.name + ("/" if e.is_dir(follow_symlinks=False) else ""))
            return sorted(out)
        finally:
            os.close(fd)

    async def diff(self) -> WorkspaceDiff:
        return await asyncio.to_thread(tree_diff, self.lower, self.merged)

    # ---------- layers ----------
    async def snapshot(self) -> str:
        def take() -> str:
            sid, d = self.backend.new_layer_dir()
            src = (self.dir / "rw" / "upper") if self.backend.overlay else self.merged
            shutil.copytree(src, d, symlinks=True)
            stack = (d, *self.layers) if self.backend.overlay else (d,)
            self.backend.snapshots[sid] = stack
            self._unmount_layers()
            self.layers = stack
            self._mount_layers()
            return sid

        return await asyncio.to_thread(take)

    async def restore(self, snapshot_id: str) -> None:
        if snapshot_id not in self.backend.snapshots:
            raise SandboxError(f"unknown snapshot {snapshot_id!r}")
        await self._remount(self.backend.snapshots[snapshot_id])

    async def reset(self) -> None:
        await self._remount(())

    async def _remount(self, layers: tuple[Path, ...]) -> None:
        def go() -> None:
            self._unmount_layers()
            self.layers = layers
            self._mount_layers()

        await asyncio.to_thread(go)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await asyncio.to_thread(self._teardown)

    async def __aenter__(self) -> LocalSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
