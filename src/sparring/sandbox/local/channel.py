"""Host side of the exec-server protocol: one bubblewrap process, many concurrent commands.

The channel owns the sandbox's bubblewrap process. It writes request frames
to the server's stdin and parses the server's frames from its stdout inside
the event loop (``add_reader``: no thread, no stream objects per command).
The process's exit is watched through a pidfd, so a server killed from
outside fails every pending command at once with a :class:`SandboxError`
instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparring.errors import SandboxError
from sparring.sandbox.local import execserver as proto

OutputCallback = Callable[[str, bytes], None]


@dataclass
class Job:
    """One command in flight: output so far and the future of its exit."""

    id: int
    done: asyncio.Future[tuple[int, int, int, bool]]
    on_output: OutputCallback | None = None
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)


def _retrieved(fut: asyncio.Future[None]) -> None:
    """Mark a future's exception as seen (it is raised again to whoever awaits it)."""
    if not fut.cancelled():
        fut.exception()


class ExecChannel:
    """A running exec server. Create with :meth:`open`."""

    def __init__(self, proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, log: Path) -> None:
        self.proc = proc
        self.loop = loop
        self.log = log
        self.jobs: dict[int, Job] = {}
        self.acks: dict[int, asyncio.Future[None]] = {}
        self.ready: asyncio.Future[int] = loop.create_future()
        self.dead: str | None = None
        self.server_pid = 0
        self._next = 1
        self._buf = bytearray()
        self._wbuf = bytearray()
        assert proc.stdin is not None and proc.stdout is not None
        self._rfd = proc.stdout.fileno()
        self._wfd = proc.stdin.fileno()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._pidfd = os.pidfd_open(proc.pid)
        self.exited = asyncio.Event()
        loop.add_reader(self._rfd, self._on_readable)
        loop.add_reader(self._pidfd, self._on_exit)

    @classmethod
    async def open(
        cls,
        argv: list[str],
        env: dict[str, str] | None,
        log: Path,
        ready_timeout: float = 30.0,
        pass_fds: tuple[int, ...] = (),
    ) -> ExecChannel:
        loop = asyncio.get_running_loop()
        with open(log, "wb") as errf:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errf,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=pass_fds,
                )
            except OSError as e:
                raise SandboxError(f"could not start bubblewrap: {e}") from None
        ch = cls(proc, loop, log)
        try:
            ch.server_pid = await asyncio.wait_for(asyncio.shield(ch.ready), ready_timeout)
        except TimeoutError:
            ch.kill()
            raise SandboxError(f"sandbox did not start within {ready_timeout:g}s: {ch.why()}") from None
        except SandboxError:
            ch.kill()
            raise
        return ch

    def _bind_loop(self) -> None:
        """Follow the caller to its event loop (a sandbox may outlive the loop that created it)."""
        loop = asyncio.get_running_loop()
        if loop is self.loop:
            return
        old, self.loop = self.loop, loop
        for fd in (self._rfd, self._pidfd):
            if fd >= 0:
                with contextlib.suppress(Exception):
                    old.remove_reader(fd)
        with contextlib.suppress(Exception):
            old.remove_writer(self._wfd)
        self.exited = asyncio.Event()
        if self.proc.poll() is not None:
            self.exited.set()
        if self.dead is None:
            loop.add_reader(self._rfd, self._on_readable)
            if self._wbuf:
                loop.add_writer(self._wfd, self._on_writable)
        if self._pidfd >= 0:
            loop.add_reader(self._pidfd, self._on_exit)

    # ---------- state ----------
    @property
    def alive(self) -> bool:
        return self.dead is None

    def why(self) -> str:
        """The last line bubblewrap or the server wrote to stderr, for error messages."""
        with contextlib.suppress(OSError):
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
            if lines:
                return lines[-1].strip()
        return self.dead or "no message"

    def _fail(self, reason: str) -> None:
        if self.dead is not None:
            return
        self.dead = reason
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self._rfd)
        with contextlib.suppress(Exception):
            self.loop.remove_writer(self._wfd)
        err = SandboxError(reason)
        if not self.ready.done():
            self.ready.set_exception(err)
        for job in self.jobs.values():
            if not job.done.done():
                job.done.set_exception(err)
        for ack in self.acks.values():
            if not ack.done():
                ack.set_exception(err)
        self.jobs.clear()
        self.acks.clear()

    # ---------- reading ----------
    def _on_readable(self) -> None:
        try:
            data = os.read(self._rfd, 1 << 20)
        except BlockingIOError:
            return
        except OSError as e:
            self._fail(f"exec server channel broke: {e.strerror}")
            return
        if not data:
            self._fail(f"exec server exited: {self.why()}")
            return
        buf = self._buf
        buf += data
        hsize = proto.HDR.size
        pos = 0
        while len(buf) - pos >= hsize:
            t, jid, n = proto.HDR.unpack_from(buf, pos)
            if len(buf) - pos - hsize < n:
                break
            payload = bytes(buf[pos + hsize : pos + hsize + n])
            pos += hsize + n
            self._dispatch(t, jid, payload)
        del buf[:pos]

    def _dispatch(self, t: int, jid: int, payload: bytes) -> None:
        if t in (proto.T_OUT, proto.T_ERR):
            job = self.jobs.get(jid)
            if job is not None:
                (job.out if t == proto.T_OUT else job.err).extend(payload)
                if job.on_output is not None:
                    job.on_output("stdout" if t == proto.T_OUT else "stderr", payload)
        elif t == proto.T_EXIT:
            job = self.jobs.pop(jid, None)
            if job is not None and not job.done.done():
                code, d_out, d_err, flags = payload.decode().split()
                job.done.set_result((int(code), int(d_out), int(d_err), "k" in flags))
        elif t == proto.T_ACK:
            ack = self.acks.pop(jid, None)
            if ack is not None and not ack.done():
                ack.set_result(None)
        elif t == proto.T_READY and not self.ready.done():
            self.ready.set_result(int(payload or b"0"))

    def _on_exit(self) -> None:
        self._close_pidfd()
        with contextlib.suppress(ChildProcessError):
            self.proc.poll()
        self.exited.set()
        # Output still in the pipe belongs to commands that already finished: read it first.
        with contextlib.suppress(Exception):
            self._on_readable()
        rc = self.proc.returncode
        self._fail(f"exec server exited (status {rc}): {self.why()}")

    # ---------- writing ----------
    def _send(self, t: int, jid: int, payload: bytes = b"") -> None:
        if self.dead is not None:
            raise SandboxError(self.dead)
        self._wbuf += proto.HDR.pack(t, jid, len(payload)) + payload
        if len(self._wbuf) == proto.HDR.size + len(payload):
            self._flush()

    def _flush(self) -> None:
        try:
            while self._wbuf:
                n = os.write(self._wfd, self._wbuf)
                del self._wbuf[:n]
        except BlockingIOError:
            self.loop.add_writer(self._wfd, self._on_writable)
            return
        except OSError as e:
            self._fail(f"exec server channel broke: {e.strerror}")
            return

    def _on_writable(self) -> None:
        self.loop.remove_writer(self._wfd)
        self._flush()

    def _new_id(self) -> int:
        jid = self._next
        self._next = jid + 1 if jid < 0xFFFFFFF0 else 1
        return jid

    # ---------- operations ----------
    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        stdin: bytes | None,
        cap: int,
        limits: dict[str, int],
        on_output: OutputCallback | None = None,
        stdin_later: bool = False,
    ) -> Job:
        """Start ``argv``; with ``stdin_later`` its stdin stays open until :meth:`feed` sends it."""
        self._bind_loop()
        jid = self._new_id()
        job = Job(jid, self.loop.create_future(), on_output)
        self.jobs[jid] = job
        try:
            has_stdin = stdin is not None or stdin_later
            self._send(proto.T_EXEC, jid, proto.encode_exec(argv, env, cwd, cap, limits, has_stdin))
            if stdin is not None:
                self.feed(jid, stdin)
        except SandboxError:
            self.jobs.pop(jid, None)
            raise
        return job

    def feed(self, jid: int, stdin: bytes) -> None:
        """Send a started command its whole stdin, then end it."""
        self._bind_loop()
        for i in range(0, len(stdin), 1 << 20):
            self._send(proto.T_STDIN, jid, stdin[i : i + (1 << 20)])
        self._send(proto.T_STDIN_EOF, jid)

    def kill_job(self, jid: int) -> None:
        self._bind_loop()
        if self.dead is None:
            self._send(proto.T_KILL, jid)

    async def call(self, t: int, timeout: float = 10.0) -> None:
        """Send PING or KILLALL and wait for the server's ACK."""
        await self.answer(self.ask(t), timeout)

    def ask(self, t: int) -> tuple[int, asyncio.Future[None]]:
        """Send PING or KILLALL now; :meth:`answer` waits for its ACK (the caller may work meanwhile)."""
        self._bind_loop()
        jid = self._new_id()
        fut: asyncio.Future[None] = self.loop.create_future()
        fut.add_done_callback(_retrieved)  # a channel that dies before the ACK is awaited logs nothing
        self.acks[jid] = fut
        self._send(t, jid)
        return jid, fut

    async def answer(self, asked: tuple[int, asyncio.Future[None]], timeout: float = 10.0) -> None:
        """Wait for the ACK of an :meth:`ask`."""
        jid, fut = asked
        if not fut.done():
            self._on_readable()  # already sent (the usual case after a remount): no trip through the loop
        if fut.done():
            return fut.result()
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.acks.pop(jid, None)
            raise SandboxError(f"exec server did not answer within {timeout:g}s") from None

    def kill(self) -> None:
        """Kill the sandbox: bubblewrap dies, the server (PID 1 of the namespace) dies, so does every process in it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self._fail("sandbox closed")

    def _close_pidfd(self) -> None:
        if self._pidfd >= 0:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1

    async def wait_closed(self, timeout: float = 5.0) -> None:
        """Wait until bubblewrap has exited (so the namespace is gone), then release the pipes."""
        self._bind_loop()
        if not self.exited.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), timeout)
        if self.proc.poll() is None:
            raise SandboxError(
                f"bubblewrap (pid {self.proc.pid}) did not exit within {timeout:g}s of SIGKILL"
            )
        self._close_pidfd()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
