"""OCI sandbox backend: one long-lived podman (runc) container per sandbox, with a shell exec server inside.

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
  sandbox is retired (closed, SandboxError), and ``healthy`` is False, so a pool replaces it;
* the server's shell and podman's init are execute-only copies (sealed.py), so neither is dumpable and no
  command can read or write their memory through /proc;
* the same reset returns /tmp, /var/tmp, /run, /dev and /dev/shm to their birth listing (scratch.py) and
  empties the IPC namespace; ctl/ is nobody's, read-only to the commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shlex
import signal
import subprocess
import time
import uuid
from pathlib import Path

from sparring.errors import SandboxError, SandboxUnavailableError
from sparring.sandbox.base import (
    OUTPUT_CAP,
    WORKSPACE,
    EnvironmentRef,
    ExecResult,
    SandboxSpec,
    WorkspaceDiff,
)
from sparring.sandbox.environment import SandboxEnvironment
from sparring.sandbox.isolation import features, ipcns, mounts
from sparring.sandbox.isolation.cgroups import pids_root, rmdir_tree
from sparring.sandbox.isolation.features import podman_argv
from sparring.sandbox.isolation.hostfiles import HostFiles
from sparring.sandbox.isolation.init_state import InitState
from sparring.sandbox.isolation.reaper import orphaned
from sparring.sandbox.oci import scratch
from sparring.sandbox.oci.image import ensure_image, first_line, ulimit_flags
from sparring.sandbox.oci.profile import write_profile
from sparring.sandbox.oci.sealed import sealed_binaries
from sparring.sandbox.oci.support import (
    BASE_ENV,
    CG_PREFIX,
    CGROUP_ROOT,
    HOSTNAME,
    NOBODY,
    SERVER_ARGV,
    SERVER_SH,
    SERVER_SHELL,
    Sink,
    cg_dirs,
    cgroup_procs,
    kill_tree,
    remove_cgroups,
    tree_empty,
)
from sparring.sandbox.storage.layers import copy_tree, discard
from sparring.sandbox.storage.workspace import diff_caps, tree_diff

__all__ = ["CG_PREFIX", "CGROUP_ROOT", "OCIBackend", "OCISandbox"]

LABEL = "sparring.oci.owner"
MS_BIND, MS_PRIVATE, MS_SHARED = 4096, 1 << 18, 1 << 20


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
        self.reap_stale()

    @property
    def image(self) -> str:
        """The default image, built on first use (``podman import``, no registry needed)."""
        if self._image is None:
            self._image = ensure_image()
        return self._image

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
                _teardown_dir(self.podman, d)
                n += 1
        r = subprocess.run(
            self.podman + ["ps", "-a", "--filter", f"label={LABEL}", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        with contextlib.suppress(ValueError, TypeError):
            for c in json.loads(r.stdout or "[]"):
                labels = c.get("Labels") or {}
                with contextlib.suppress(ValueError):
                    if orphaned(int(labels.get(LABEL, "-1"))):
                        subprocess.run(
                            self.podman + ["rm", "-f", "-t", "0", c["Id"]], capture_output=True, timeout=60
                        )
                        sdir = labels.get("sparring.oci.dir")
                        if sdir and Path(sdir).name.startswith("oci-"):
                            _teardown_dir(self.podman, Path(sdir))
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


def _teardown_dir(podman: list[str], d: Path) -> None:
    """Remove the container, mounts, cgroups and directory of sandbox dir ``d`` (idempotent)."""
    with contextlib.suppress(OSError):
        cid = (d / "cid").read_text().strip()
        if cid:
            subprocess.run(podman + ["rm", "-f", "-t", "0", cid], capture_output=True, timeout=60)
    for mp in mounts.mounts_below(d):
        with contextlib.suppress(SandboxError):
            mounts.umount(mp)
    remove_cgroups(d.name.removeprefix("oci-"))
    discard(d)


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rfind(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _run_state(pid: int) -> str:
    """The state letter of host process ``pid`` (R, S, D, T stopped, Z...), "" when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rfind(")") + 2 :].split()[0]
    except (OSError, IndexError):
        return ""


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def environment_mounts(ref: EnvironmentRef | None, host_system: bool = True) -> list[str]:
    """podman flags that make the spec's Python layer runnable in the container: the base interpreter's
    prefix and the layer, read-only at their own paths, and with ``host_system`` (the default busybox
    image, which has no C library) the host's /usr and library directories too; a task's own image
    keeps its system (and its /bin: the exec server's shell and tools)."""
    if ref is None:
        return []
    if not (Path(ref.path) / "bin" / "python").exists():
        raise SandboxError(
            f"environment layer {ref.path} has no bin/python: rebuild it (sparring tasks check builds it)"
        )
    out: list[str] = []
    if host_system:
        out += ["-v", "/usr:/usr:ro"]
        for name in ("lib", "lib64", "lib32", "libx32"):
            p = Path("/") / name
            if p.exists():
                out += ["-v", f"{p.resolve()}:/{name}:ro"]
    for p in SandboxEnvironment.of_layer(Path(ref.path)).ro_paths:
        out += ["-v", f"{Path(p).resolve()}:{p}:ro"]
    return out


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
        # The host touches per-exec files only through this descriptor, exclusively and without
        # following links (defence in depth: commands cannot write x/, see below).
        self._xfd = os.open(self.ctl / "x", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        (self.ctl / "server.sh").write_text(SERVER_SH)
        os.mkfifo(self.ctl / "req", 0o600)
        self._req_fd = os.open(self.ctl / "req", os.O_RDWR | os.O_NONBLOCK)
        # Commands are (capability-less) uid 0: owned by nobody and read-only to others, ctl/ and x/
        # take no new, renamed or removed entry from inside, and the server's script and request FIFO
        # no write; the per-exec files the host makes there stay root's, the server's to open.
        for f, mode in ((self.ctl, 0o755), (self.ctl / "x", 0o755), (self.ctl / "server.sh", 0o444),
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
        argv = self.backend.podman + [
            "run", "-d", "--pull", "never", "--name", f"sparring-oci-{self.id}",
            "--label", f"{LABEL}={os.getpid()}", "--label", f"sparring.oci.id={self.id}",
            "--label", f"sparring.oci.dir={self.dir}",
            "--network", "none", "--cgroupns", "host", "--read-only", "--init", "--init-path", str(self.backend.sealed_init), "--log-driver", "none", "--hostname", HOSTNAME,
            "--user", "0:0", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--security-opt", f"seccomp={self.backend.seccomp_profile}",
            "--cgroup-parent", f"/{CG_PREFIX}{self.id}",
            "-v", f"{self.ws}:{WORKSPACE}:rslave", "-v", f"{self.ctl}:/.sparring",
            "-v", f"{self._exec_cg}:/.sparring-cg", "-v", f"{self.backend.sealed_sh}:{SERVER_SHELL}:ro",
            *ulimit_flags(),
        ]  # fmt: skip
        if s.workspace_alias is not None:  # the image's own path of it (/testbed): one more slave of ws/
            argv += ["-v", f"{self.ws}:{s.workspace_alias}:rslave"]
        argv += environment_mounts(s.environment, host_system=s.image is None)
        for dest, src in sorted(s.extra_ro.items()):
            argv += ["-v", f"{Path(src).resolve()}:{dest}:ro"]
        for dest, src in sorted(s.extra_rw.items()):
            argv += ["-v", f"{Path(src).resolve()}:{dest}"]
        if s.memory_mb is not None:
            argv += ["--memory", f"{s.memory_mb}m", "--memory-swap", f"{s.memory_mb}m"]
        if s.pids is not None:
            argv += ["--pids-limit", str(s.pids)]
        if s.cpus is not None:
            argv += ["--cpus", f"{s.cpus:g}"]
        argv += [self.image, SERVER_SHELL, "/.sparring/server.sh"]
        # conmon inherits the working directory and drops an `oom` marker file there on OOM kills.
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=self.dir)
        if r.returncode != 0:
            msg = first_line(r.stderr)
            if "image not known" in msg or "manifest unknown" in msg or "unable to pull" in msg.lower():
                raise SandboxError(
                    f"container image {self.image!r} not found locally: build or load it first"
                )
            raise SandboxError(f"podman could not start the sandbox container: {msg}")
        self.cid = r.stdout.strip().splitlines()[-1]
        (self.dir / "cid").write_text(self.cid)
        self.init_pid, self.server_pid = self._find_server()
        self.born = {p: InitState.read(p) for p in (self.init_pid, self.server_pid)}
        self._scratch = scratch.listing(self.server_pid)
        # Mount the layers only now: the container's /workspace is a slave of ws/ and receives it.
        self._mount_layers()

    def _find_server(self, wait_s: float = 60.0) -> tuple[int, int]:
        """The host pids of podman's init and of the exec server, its only child (no command ran yet)."""
        deadline = time.monotonic() + wait_s
        while True:
            procs = set(self._members())
            init = [p for p in procs if _ppid(p) not in procs]
            server = [
                p for p in procs if init and _ppid(p) == init[0] and _cmdline(p).startswith(SERVER_ARGV)
            ]
            if len(init) == 1 and len(server) == 1 and procs == {init[0], server[0]}:
                return init[0], server[0]
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"the exec server of sandbox {self.id} did not start (container processes {sorted(procs)})"
                )
            time.sleep(0.01)

    def _members(self) -> list[int]:
        """Every process of the container, read from the host: its cgroups in every hierarchy and the
        commands' pids cgroups (conmon, podman's monitor beside them, is not one)."""
        if not self._cg_parents:
            self._cg_parents = cg_dirs(CG_PREFIX + self.id)
        out = {p for parent in self._cg_parents for p in cgroup_procs(parent / f"libpod-{self.cid}")}
        assert self._exec_cg is not None
        for dirpath, _, _ in os.walk(self._exec_cg):
            out.update(cgroup_procs(Path(dirpath)))
        return sorted(out)

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
        _teardown_dir(self.backend.podman, self.dir)

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
        try:
            return all(
                InitState.read(p) == born and _run_state(p) in ("R", "S", "D")
                for p, born in self.born.items()
            )
        except SandboxError:
            return False

    # ---------- exec ----------
    def _script(self, n: int, argv: list[str], env: dict[str, str], cwd: str) -> str:
        """The command's script, run by the server's busybox: ``setsid`` and ``env`` are its applets, and
        a bare program name is looked up on the command's PATH here (busybox would prefer its own applet
        of that name to the image's program)."""
        q = shlex.quote
        dirs = " ".join(q(d) for d in env.get("PATH", "").split(":") if d)
        return "\n".join([
            f"cd -- {q(cwd)} 2>/dev/null || {{ echo {q(f'sparring: cannot chdir to {cwd}')} >&2; exit 125; }}",
            f"p={q(argv[0])}",
            f'case $p in */*) ;; *) for d in {dirs}; do [ -f "$d/$p" ] && [ -x "$d/$p" ] && {{ p="$d/$p"; break; }}; done;; esac',
            "exec setsid env -i " + " ".join(q(f"{k}={v}") for k, v in sorted(env.items())) + ' "$p" ' + " ".join(map(q, argv[1:])),
            "",
        ])  # fmt: skip

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
        if self.spec.environment is not None:
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
            self._write_exec_file(f"{n}.sh", self._script(n, argv, full_env, cwd).encode())
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
            left = self._kill_commands()
            if left:
                return f"{len(left)} of its processes survived the kill (host pids {left[:8]})"
            try:
                changed = scratch.restore(self.server_pid, self._scratch)
                ipcns.clear(self.server_pid)
            except (OSError, SandboxError, RecursionError) as e:  # a tree nested past the walk's depth too
                return f"its scratch places or IPC objects could not be emptied ({type(e).__name__}: {e})"
            if changed:
                return "a command changed what a reset cannot put back outside /workspace: " + ", ".join(
                    changed[:8]
                )
            self._unmount_layers()
            self.layers = layers
            self._mount_layers()
            return self._check_fresh()

        why = await asyncio.to_thread(go)
        if why:
            await self._retire(why)

    def _kill_commands(self, rounds: int = 500) -> list[int]:
        """SIGKILL every process of the container but the init and the exec server, by the host, from the
        cgroups (nothing inside is asked); requests a command queued for the server are discarded, and
        the commands' cgroups removed. Returns the pids still there after ``rounds`` passes."""
        keep = {self.init_pid, self.server_pid}
        left: list[int] = []
        for _ in range(rounds):
            with contextlib.suppress(BlockingIOError, OSError):
                while os.read(self._req_fd, 65536):  # exec ids queued from inside: not the host's
                    pass
            left = [p for p in self._members() if p not in keep]
            if not left:
                break
            for p in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.002)
        assert self._exec_cg is not None
        for d in self._exec_cg.iterdir():
            if d.is_dir():
                rmdir_tree(d)
        return left

    def _check_fresh(self) -> str:
        """The host's check after a reset: nothing but the init and the exec server in the container's
        cgroups, and both in the state they were born with; else why not."""
        left = [p for p in self._members() if p not in (self.init_pid, self.server_pid)]
        if left:
            return f"processes other than its exec server outlived the reset (host pids {left[:8]})"
        for pid, born in self.born.items():
            who = "exec server" if pid == self.server_pid else "init"
            try:
                changed = born.changes(InitState.read(pid))
            except SandboxError as e:
                return str(e)
            if changed:
                return f"its {who}'s state changed since it started (" + "; ".join(changed) + ")"
            run_state = _run_state(pid)
            if run_state not in ("R", "S", "D"):  # a command may SIGSTOP the server (PID 2: not immune)
                return f"its {who} is not running (state {run_state or 'gone'})"
        return ""

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
