"""Local sandbox backend: one long-lived bubblewrap per sandbox, an exec server inside, overlayfs layers.

Layout of one sandbox under the backend root::

    <root>/sb-<id>/
        owner          pid of the owning process (the reaper removes orphans); <id> names it too, so
                       the directory and its cgroups sparring/<id> are owned from their mkdir on
        cgroups        the sandbox's cgroup directories, one per line (for the reaper)
        bwrap.log      what bubblewrap and the exec server wrote to stderr
        rw/            tmpfs of size disk_mb: upper/ and work/ of the overlay, tmp/, home/, shm/
        shm            rw/shm bound here; bubblewrap bound this point as /dev/shm, so it propagates
        root/          the sandbox's / (a shared mount; see rootfs.py), with
          workspace/   overlayfs: rw/upper over [snapshot layers...] over the task workspace
          tmp/, home/agent/   bound from rw/, so every byte the sandbox writes counts against disk_mb

``create`` mounts the layers, then starts bubblewrap with every namespace
unshared (user, pid, net, ipc, uts, cgroup), no capabilities, uid 1000, no
further user namespaces, and the exec server (execserver.py) as PID 1. Each
``exec`` is then a round trip over a pipe; commands run concurrently, stream
their output, and background processes persist between calls. ``reset`` and
``restore`` kill every process but the server and swap the mounts under the
running sandbox, and empty its IPC namespace (ipcns.py): every writable
place (/workspace, /tmp, $HOME, /dev/shm; / and /dev are read-only) lives on
the one rw tmpfs, so the next user finds nothing of the last. The kill is the
host's, through the kernel (sweep.py: freeze the sandbox's cgroup, SIGKILL every
member but bubblewrap and the server, thaw), never the server's own walk of its
/proc, which runs with the agent's uid. After every ``reset`` and ``restore`` the
host checks that nothing but PID 1 is left and that PID 1 is as it was born
(init_state.py: rlimits, nice, scheduling, I/O priority, affinity, cgroups,
credentials); otherwise the sandbox is *retired*: killed, and the call raises
:class:`SandboxError` (a pool then closes it and makes a new one). ``snapshot``
freezes the sandbox (cgroup freezer), copies the upper layer into the
content-addressed layer store, and thaws it. ``close``
kills bubblewrap, which takes the whole pid namespace with it, then unmounts
and removes everything. A watchdog process cleans up after an owner that dies
without closing (see reaper.py), and a restarted backend reaps what a dead one
left.

Without root (no mount rights) the backend falls back to *copy mode*: the
workspace is copied instead of overlaid; /tmp, the home directory and /dev/shm
are host directories that reset empties; no disk quota is enforced; isolation by
bubblewrap is unchanged. ``sparring doctor`` says which mode a host gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sparring.errors import SandboxError, WorkspaceFault
from sparring.sandbox.base import WORKSPACE, SandboxSpec, WorkspaceDiff
from sparring.sandbox.crashpoint import crash_point
from sparring.sandbox.environment import AGENT_GID, AGENT_UID, HOSTNAME
from sparring.sandbox.isolation import ipcns, mounts, reaper, seccomp, sweep
from sparring.sandbox.isolation.cgroups import CgroupSet
from sparring.sandbox.isolation.hostfiles import HostFiles
from sparring.sandbox.isolation.init_state import InitState, ProcFiles
from sparring.sandbox.isolation.netns import set_loopback
from sparring.sandbox.local import execserver
from sparring.sandbox.local.channel import ExecChannel
from sparring.sandbox.local.commands import Commands
from sparring.sandbox.local.proxy import PROXY_PORT, AllowlistProxy, Attempt, parse_allow
from sparring.sandbox.local.rootfs import HOME, SERVER
from sparring.sandbox.local.rwlayer import Spare, WritableLayers
from sparring.sandbox.storage import hosttree
from sparring.sandbox.storage.layers import discard
from sparring.sandbox.storage.workspace import diff_caps, tree_diff

if TYPE_CHECKING:
    from sparring.sandbox.local.backend import LocalBackend

UNFROZEN_SNAPSHOT_TRIES = 8  # without a freezer a snapshot copies a running tree: retries on a vanished entry
KILL_GRACE_S = 5.0  # how long a killed command may take to be reported before the sandbox counts as broken
_JOIN_CGROUPS = (  # $1: ':'-separated cgroup.procs files; the rest: the command (the C server's --launch does both)
    'IFS=:; for f in $1; do echo $$ > "$f" 2>/dev/null || '
    '{ echo "sparring: cannot join cgroup $f" >&2; exit 125; }; done; shift; unset IFS; exec "$@"'
)


async def to_thread_to_end(fn: Callable[..., object], *args: object) -> None:
    """Run blocking host work (mounts, cgroups) in a worker thread, and return only once it has ended:
    a thread cannot be stopped, so a caller cancelled meanwhile waits for it before cleaning up (else
    a mount made after the cleanup would be left behind)."""
    fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait([fut])
        raise


class LocalSandbox(Commands, HostFiles, WritableLayers):
    """One sandbox of the local backend. Use ``await backend.create(spec)``."""

    def __init__(
        self, backend: LocalBackend, spec: SandboxSpec, lower: Path | None, layers: tuple[Path, ...] = ()
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.environment, self.plan = backend.runtime_for(spec)
        self.image = backend.image_for(spec)  # None: the host's root
        self.server_kind, self.server = (
            (self.image.server_kind, self.image.server)
            if self.image
            else (backend.server_kind, backend.server)
        )
        self.id = reaper.new_sandbox_id()  # names the owner: nothing of it is ever unattributable
        self.dir = backend.home / f"sb-{self.id}"
        self.rootdir = self.dir / "root"
        self.rw = self.dir / "rw"
        self.merged = self.ws = self.rootdir / "workspace"
        # The image's own path of the workspace (/testbed): the same overlay bound there as well.
        self.alias = spec.workspace_alias
        self.files_owner = backend.agent_uid
        self._empty = self.dir / "empty"
        self._lower = lower
        self.layers = layers
        self.cg = CgroupSet(self.id)
        self.closed = False
        self.channel: ExecChannel | None = None
        self.kill_grace_s = KILL_GRACE_S
        self.proxy: AllowlistProxy | None = None
        self._sb_mounted = False
        self._layer_mounts: list[Path] = []
        self._shm_point = self.dir / "shm"  # outside root/: only the sandbox's /dev/shm is bound from it
        self._lower_size: int | None = None
        self.members: sweep.Members | None = None  # how the host finds (and kills) the sandbox's processes
        self.born: InitState | None = None  # PID 1's state when it started, checked after every reset
        self._server_files: ProcFiles | None = None
        self._spare = Spare(self.dir, backend.agent_uid)  # the next rw tmpfs, made ahead (rwlayer.py)
        self._ipc: ipcns.HeldNamespace | None = None

    @property
    def lower(self) -> Path:
        return self._lower if self._lower is not None else self._empty

    # ---------- lifecycle ----------
    async def _start(self, workspace: bool = True) -> None:
        """Make and start the sandbox; without ``workspace`` /workspace stays an empty directory until
        :meth:`_adopt` mounts it (a pre-started sandbox, see prefork.py). Its directories, mounts and
        cgroups are made in a worker thread (:meth:`_prepare`): milliseconds of system calls that would
        otherwise hold the event loop and every other sandbox's commands with it (a pre-fork refill
        runs beside the commands of the sandboxes already handed out)."""
        b, s = self.backend, self.spec
        await to_thread_to_end(self._prepare, workspace)
        if s.network == "allowlist":
            (self.dir / "proxy").mkdir(mode=0o755)
            self.proxy = AllowlistProxy(self.dir / "proxy" / "proxy.sock", parse_allow(s.allow_hosts))
            await self.proxy.start()
            if b.overlay:
                mounts.bind(self.dir / "proxy", self.rootdir / "run/sparring", readonly=True)
        sc_args, sc_fd = seccomp.bwrap_args(
            b.seccomp_program
        )  # installed by bubblewrap before the server starts
        fds = [sc_fd] + ([b.userns_fd] if b.userns_fd is not None else [])
        net_fd = b.netns.take(loopback=s.network != "none") if b.netns is not None else None
        if net_fd is not None:
            fds.append(net_fd)
        argv = self._launcher(net_fd) + self._bwrap_argv(sc_args, own_netns=net_fd is None)
        try:
            self.channel = await ExecChannel.open(
                argv, {"PATH": "/usr/bin:/bin"}, self.dir / "bwrap.log", pass_fds=tuple(fds)
            )
        finally:
            seccomp.close_fd(sc_fd)
            if net_fd is not None:
                os.close(net_fd)
        if b.overlay:
            self._mount_shm()
        server = self.server_host_pid()
        if net_fd is None and s.network == "none" and os.geteuid() == 0:
            set_loopback(server, up=False)  # an empty network namespace: not even loopback
        assert self.channel is not None
        try:
            ns = sweep.pid_ns_of(server)
        except OSError as e:
            raise SandboxError(
                f"sandbox {self.id}: its pid namespace cannot be read ({e.strerror})"
            ) from None
        self.members = sweep.Members(self.cg, ns, bwrap=self.channel.proc.pid, server=server)
        self._server_files = ProcFiles(server)  # held: read again after every reset (init_state.py)
        if b.overlay:  # as root: emptied on every reset (ipcns.py)
            self._ipc = ipcns.HeldNamespace(server)
        self.born = self._server_files.read()

    def _prepare(self, workspace: bool) -> None:
        """Everything of the sandbox before bubblewrap starts: its directory and tmpfs, the root's binds,
        the writable layers, its cgroups (blocking calls only: run off the event loop)."""
        b, s = self.backend, self.spec
        self.dir.mkdir(mode=0o711)
        crash_point("sandbox-dir")
        if b.overlay:
            # The sandbox's own small tmpfs, shared: mounts made under root/ later reach the running
            # sandbox, and close() is one unmount instead of a directory walk.
            mounts.mount(
                "tmpfs", self.dir, "tmpfs", "size=4m,mode=0711", flags=mounts.MS_NOSUID | mounts.MS_NODEV
            )
            self._sb_mounted = True
            mounts.mount("none", self.dir, "", flags=mounts.MS_SHARED)
        crash_point("sandbox-mounted")
        (self.dir / "owner").write_text(str(os.getpid()))
        self._empty.mkdir()
        self.rootdir.mkdir(mode=0o755)
        if b.overlay:
            self._shm_point.mkdir(mode=0o755)
        if self.image is not None and b.overlay:
            # The image's prepared root, shared read-only by its sandboxes; this bind is this sandbox's
            # own (on its shared tmpfs), so what the host mounts under it reaches only this sandbox.
            mounts.bind(self.image.root, self.rootdir, readonly=True)
        self.plan.populate(self.rootdir)
        if self.alias is not None and self.image is None:  # the host's root: make the mount point
            (self.rootdir / self.alias.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for dest in (*s.extra_ro, *s.extra_rw):
            p = self.rootdir / dest.lstrip("/")
            if self.image is None:
                p.mkdir(parents=True, exist_ok=True)
        if b.overlay:
            self._bind_static()
        self._mount_layers(shm=False, workspace=workspace)  # /dev/shm: once bubblewrap bound its point
        self.cg = CgroupSet.create(self.id, s.memory_mb, s.pids, s.cpus, freezer=True)
        self.cg.hold()
        crash_point("sandbox-cgroups")
        if self.cg.dirs:
            (self.dir / "cgroups").write_text("\n".join(map(str, self.cg.dirs.values())) + "\n")

    def _bind_static(self) -> None:
        """Read-only binds that never change, made by the host (root) so bubblewrap needs no access to them."""
        r = self.rootdir
        for src, dest in self.plan.ro_binds:
            mounts.bind(src, r / dest.lstrip("/"), readonly=True)
        mounts.bind(self.server, r / SERVER.lstrip("/"), readonly=True)
        uid = self.backend.agent_uid
        for dest, src in sorted(self.spec.extra_ro.items()):
            with contextlib.suppress(OSError):  # the agent user must be able to enter it (mkdtemp makes 0700)
                os.chmod(src, os.stat(src).st_mode | 0o055)
            mounts.bind(Path(src), r / dest.lstrip("/"), readonly=True)
        for dest, src in sorted(self.spec.extra_rw.items()):
            if uid is not None:
                os.chown(src, uid, uid)
            mounts.bind(Path(src), r / dest.lstrip("/"))

    def _launcher(self, net_fd: int | None) -> list[str]:
        """Join the sandbox's cgroups (and network namespace), then exec bubblewrap: nothing of the
        sandbox runs outside its limits."""
        b = self.backend
        cg = ":".join(map(str, self.cg.procs_files()))
        if b.server_kind == "c" and (cg or net_fd is not None):
            net = "-" if net_fd is None else str(net_fd)
            return [str(b.server), "--launch", str(os.getuid()), str(os.getgid()), cg, net, "--"]
        if not cg:
            return []
        return ["/bin/sh", "-c", _JOIN_CGROUPS, "sparring-join", cg]

    def _bwrap_argv(self, extra: list[str], own_netns: bool = True) -> list[str]:
        s, b = self.spec, self.backend
        a: list[str] = [b.bwrap or "bwrap", *extra]
        if (
            b.userns_fd is not None
        ):  # the backend's user namespace: uid 1000 inside is an unprivileged host user
            a += ["--userns", str(b.userns_fd), "--unshare-pid", "--unshare-ipc"]
            a += ["--unshare-uts", "--unshare-cgroup"] + (["--unshare-net"] if own_netns else [])
        else:  # unprivileged: bubblewrap makes the user namespace, uid 1000 maps to the caller
            a += ["--unshare-all", "--unshare-user", "--disable-userns"]
        a += ["--die-with-parent", "--as-pid-1", "--cap-drop", "ALL"]
        a += ["--uid", str(AGENT_UID), "--gid", str(AGENT_GID), "--hostname", HOSTNAME]
        if self.image is not None and not b.overlay:  # copy mode: bubblewrap binds the image's root itself
            a += ["--ro-bind", str(self.image.root), "/"]
        else:
            a += ["--bind", str(self.rootdir), "/"]
        if not b.overlay:  # copy mode: the host cannot mount, bubblewrap binds everything itself
            a += self.plan.bwrap_ro_binds() + ["--ro-bind", str(self.server), SERVER]
            # /tmp and $HOME are host directories (not bubblewrap tmpfs the host cannot reach), so reset
            # empties them as it refills the workspace: nothing written before a reset survives it.
            a += ["--bind", str(self.merged), WORKSPACE, "--bind", str(self.rw / "tmp"), "/tmp"]
            if self.alias is not None:  # the same directory again: refilled in place, seen at both
                a += ["--bind", str(self.merged), self.alias]
            a += ["--bind", str(self.rw / "home"), HOME]
            for p in self.plan.late_binds:
                a += ["--ro-bind", str(p), str(p)]
            for dest, src in sorted(s.extra_ro.items()):
                a += ["--ro-bind", str(src), dest]
            for dest, src in sorted(s.extra_rw.items()):
                a += ["--bind", str(src), dest]
        if self.proxy is not None and not b.overlay:
            a += ["--ro-bind", str(self.dir / "proxy"), "/run/sparring"]
        a += ["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev"]
        if b.overlay:  # a propagation point: the host binds rw/shm there after start (see _mount_shm)
            a += ["--bind", str(self._shm_point), "/dev/shm"]
        else:  # a host directory too, emptied by reset
            a += ["--bind", str(self.rw / "shm"), "/dev/shm"]
        # The IPC namespace's POSIX queues, visible so reset can remove them; /dev itself read-only
        # (bubblewrap's /dev is a tmpfs the agent owns: a place no reset would clear).
        a += ["--mqueue", "/dev/mqueue", "--remount-ro", "/dev"]
        a += ["--remount-ro", "/"]
        a += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--chdir", "/"]
        env = self.environment
        a += ["--", SERVER] if self.server_kind == "c" else ["--", env.interpreter, "-I", "-S", SERVER]
        if self.proxy is not None:
            a += ["--proxy", str(PROXY_PORT), "/run/sparring/proxy.sock"]
        return a

    def _adopt(self, spec: SandboxSpec, lower: Path | None, layers: tuple[Path, ...]) -> None:
        """Make a pre-started sandbox (only its exec server ever ran) the sandbox of ``spec``: the spec's
        env and seed apply from its next exec, and its workspace is mounted under the running sandbox
        (the mount propagates to /workspace, as a reset's does)."""
        self.spec, self._lower, self.layers, self._lower_size = spec, lower, layers, None
        self._mount_workspace()

    async def _teardown(self) -> None:
        if self.channel is not None:
            self.channel.kill()
            with contextlib.suppress(SandboxError):
                await self.channel.wait_closed()
        if self.proxy is not None:
            await self.proxy.close()
        with contextlib.suppress(Exception):
            if not self.cg.destroy(wait_s=0):  # members still exiting: wait for them off the event loop
                await to_thread_to_end(self.cg.destroy)
        if self._server_files is not None:
            self._server_files.close()
        if self._ipc is not None:
            self._ipc.close()
        if self._sb_mounted:  # detaching the sandbox's tmpfs takes every mount below it along
            with contextlib.suppress(SandboxError):
                mounts.umount(self.dir)
            self._sb_mounted = False
        self._layer_mounts = []
        try:
            os.rmdir(self.dir)
        except FileNotFoundError:
            pass
        except OSError:
            discard(self.dir)  # iterative: however deep the agent's tree

    def _check_open(self) -> None:
        self._live()

    def _live(self) -> ExecChannel:
        if self.closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        ch = self.channel
        if ch is None or not ch.alive:
            why = ch.dead if ch is not None else "not started"
            raise SandboxError(f"sandbox {self.id} is broken ({why}); close it and create a new one")
        return ch

    def server_host_pid(self) -> int:
        """The exec server's pid on the host (the only child of bubblewrap)."""
        if self.members is not None:
            return self.members.server
        assert self.channel is not None
        bw = self.channel.proc.pid
        try:
            kids = (Path(f"/proc/{bw}/task/{bw}/children")).read_text().split()
        except OSError as e:
            raise SandboxError(f"sandbox {self.id}: bubblewrap is gone ({e.strerror})") from None
        if len(kids) != 1:
            raise SandboxError(f"sandbox {self.id}: expected one process under bubblewrap, found {len(kids)}")
        return int(kids[0])

    @property
    def network_attempts(self) -> list[Attempt]:
        """Every connection tried through the allowlist proxy (allowed or refused)."""
        return list(self.proxy.attempts) if self.proxy is not None else []

    @property
    def healthy(self) -> bool:
        return not self.closed and self.channel is not None and self.channel.alive

    async def ping(self, timeout: float = 5.0) -> None:
        await self._live().call(execserver.T_PING, timeout)

    async def _break(self, why: str) -> None:
        if self.channel is not None:
            self.channel.kill()
        raise SandboxError(f"sandbox {self.id}: {why}; it was killed")

    async def diff(self) -> WorkspaceDiff:
        """The change to /workspace, taken with the sandbox frozen so nothing moves under the walk.

        It carries at most :func:`diff_caps` of the disk quota (apparent sizes); beyond that, or for
        names a diff cannot hold, it comes back flagged (see :class:`WorkspaceDiff`) rather than raising.
        """
        self._live()
        frozen = self.cg.freeze()
        try:
            return await asyncio.to_thread(tree_diff, self.lower, self.merged, *diff_caps(self.spec.disk_mb))
        finally:
            if frozen:
                self.cg.thaw()

    # ---------- layers ----------
    async def snapshot(self) -> str:
        """Freeze the current state as a new read-only layer; cost is proportional to the change.

        The sandbox is frozen during the copy in both modes, and the copy never follows a link. What
        the agent made beyond its quota (apparent sizes) raises :class:`WorkspaceFault`, a fault of
        this sandbox only; the sandbox itself stays usable.
        """
        self._live()
        b = self.backend
        if b.overlay:
            src, below, budget = self.rw / "upper", self.layers, self.spec.disk_mb << 20
        else:  # copy mode copies the whole tree: the quota comes on top of the initial workspace
            src, below, budget = self.merged, (), (self.spec.disk_mb << 20) + await self._lower_bytes()
        frozen = self.cg.freeze()
        try:
            for attempt in range(1 if frozen else UNFROZEN_SNAPSHOT_TRIES):
                try:
                    snap = await asyncio.to_thread(b.layers.freeze, src, below, self.lower, budget)
                    break
                except (
                    WorkspaceFault
                ) as e:  # no freezer: an entry vanished or moved under the walk; walk again
                    if frozen or e.flag not in ("workspace_unreadable", "workspace_changed"):
                        raise
                    if attempt == UNFROZEN_SNAPSHOT_TRIES - 1:
                        raise WorkspaceFault(
                            f"sandbox {self.id}: the workspace kept changing under {attempt + 1} snapshot "
                            "copies (no cgroup freezer here: run as root for frozen snapshots)",
                            "workspace_changed",
                        ) from None
        finally:
            if frozen:
                self.cg.thaw()
        return snap.id

    async def _lower_bytes(self) -> int:
        """Apparent size of the initial workspace's files (computed once: the lower never changes)."""
        if self._lower_size is None:
            total = 0

            def count(e: hosttree.Entry) -> bool:
                nonlocal total
                total += e.st.st_size if stat.S_ISREG(e.st.st_mode) else 0
                return True

            if self.lower.is_dir():
                await asyncio.to_thread(hosttree.walk, self.lower, count)
            self._lower_size = total
        return self._lower_size

    async def restore(self, snapshot_id: str) -> None:
        """Return to a snapshot: every process is killed, the files are the snapshot's."""
        snap = self.backend.layers.load(snapshot_id)
        if snap is None:
            raise SandboxError(f"unknown snapshot {snapshot_id!r}")
        if snap.base != str(self.lower):
            raise SandboxError(f"snapshot {snapshot_id} belongs to another workspace ({snap.base})")
        await self._remount(snap.layers)

    async def reset(self) -> None:
        """Back to the initial state: every process is killed, every write discarded."""
        await self._remount(())

    @property
    def degraded(self) -> tuple[str, ...]:
        """Each limit of the spec that is weaker than asked or not enforced (no writable cgroups), and
        the reset kill when it cannot use a cgroup (see sweep.py)."""
        if self.members is not None and not self.members.by_cgroup:
            return (*self.cg.degraded, sweep.DEGRADED)
        return self.cg.degraded

    @property
    def reusable(self) -> bool:
        """Whether ``reset`` returns every writable place and namespace-held object to its initial state.

        True as root (overlay mode): /workspace, /tmp, $HOME and /dev/shm are one tmpfs that reset replaces,
        /dev is read-only, and the IPC namespace is emptied. Copy mode empties /tmp, $HOME and /dev/shm (host
        directories) but keeps IPC objects across reset, and a spec's extra_rw mounts are host directories reset never touches, so a
        pool closes such a sandbox instead of handing it to the next rollout.
        """
        return self.backend.overlay and not self.spec.extra_rw

    async def _remount(self, layers: tuple[Path, ...]) -> None:
        ch = self._live()
        killall = await self._kill_all(ch)  # its ACK arrives while the layers are remounted
        if self.backend.overlay:
            try:  # after the kill: nothing holds a segment, so its memory is uncharged at once
                if self._ipc is not None:
                    self._ipc.clear()
                else:
                    ipcns.clear(self.server_host_pid())
            except SandboxError as e:
                await self._break(f"its IPC namespace could not be emptied ({e})")
        self._unmount_layers()
        self.layers = layers
        try:
            self._mount_layers()
        except SandboxError as e:
            await self._break(f"remounting its layers failed ({e})")
        await ch.answer(killall)
        await self._check_fresh()
        if self.backend.overlay:
            self._spare.soon(lambda: self.rw, lambda: self.spec.disk_mb, lambda: self.healthy)

    async def _kill_all(self, ch: ExecChannel) -> tuple[int, asyncio.Future[None]]:
        """Every process but PID 1 killed by the host (sweep.py), then the server's KILLALL sent, which
        now only reaps and reports the commands that died; returns it, for ``ch.answer`` (the host's
        check that nothing is left comes after that)."""
        m = self.members
        assert m is not None
        if sweep.leftovers(m):
            left = await asyncio.to_thread(sweep.sweep, m)
            if left:
                await self._break(
                    f"retired: {len(left)} of its processes survived the kill (host pids {left[:8]})"
                )
        return ch.ask(execserver.T_KILLALL)

    async def _check_fresh(self) -> None:
        """The host's check after a reset or restore: nothing but PID 1 runs in the sandbox, and PID 1's
        state is the one it started with; else the sandbox is retired (killed, SandboxError)."""
        m, born = self.members, self.born
        assert m is not None and born is not None
        left = sweep.leftovers(m)
        if left:
            await self._break(
                f"retired: processes other than its exec server outlived the reset ({left[:8]})"
            )
        why = born.drift(self._server_files or m.server, "exec server")
        if why:
            await self._break(f"retired: {why}")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self._teardown()

    async def __aenter__(self) -> LocalSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
