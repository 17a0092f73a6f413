"""Running commands in a local sandbox: the host side of ``exec`` and ``prestart`` over its exec server.

A mixin of :class:`~sparring.sandbox.local.sandbox.LocalSandbox` (which owns the channel, the cgroups and
the spec): one command is started on the channel with the sandbox's environment and rlimits, then
waited for with its timeout, its kill on timeout and its out-of-memory report. A prestarted command
is started now with its stdin held open and told what to do later (:class:`Prestarted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from sparring.errors import SandboxError
from sparring.sandbox.base import OUTPUT_CAP, TRUNC_MARKER, WORKSPACE, ExecResult, SandboxSpec
from sparring.sandbox.local.channel import ExecChannel, Job, OutputCallback
from sparring.sandbox.local.proxy import PROXY_PORT, AllowlistProxy

if TYPE_CHECKING:
    from sparring.sandbox.environment import SandboxEnvironment
    from sparring.sandbox.isolation.cgroups import CgroupSet


def _decode(data: bytes | bytearray, dropped: int) -> str:
    text = bytes(data).decode("utf-8", errors="replace")
    return text + TRUNC_MARKER.format(n=dropped) if dropped else text


class Commands:
    """The command half of a local sandbox (a mixin: the sandbox provides what is declared here)."""

    id: str
    spec: SandboxSpec
    environment: SandboxEnvironment
    proxy: AllowlistProxy | None
    cg: CgroupSet
    kill_grace_s: float

    if TYPE_CHECKING:

        def _live(self) -> ExecChannel: ...

        @property
        def healthy(self) -> bool: ...

        async def _break(self, why: str) -> None: ...

    def _limits(self) -> dict[str, int]:
        lim = {"nofile": self.spec.nofile, "core": 0}
        lim.update(self.cg.rlimits)
        return lim

    def _full_env(self, env: dict[str, str] | None) -> dict[str, str]:
        full_env = self.environment.base_env(self.spec.seed)
        if self.proxy is not None:
            url = f"http://127.0.0.1:{PROXY_PORT}"
            for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
                full_env[k] = url
            full_env["NO_PROXY"] = full_env["no_proxy"] = "localhost,127.0.0.1"
        full_env.update(self.spec.env)
        full_env.update(env or {})
        return full_env

    def _start_job(
        self,
        cmd: list[str] | str,
        env: dict[str, str] | None,
        cwd: str,
        stdin: bytes | None,
        on_output: OutputCallback | None,
        stdin_later: bool = False,
    ) -> Job:
        ch = self._live()
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise SandboxError("empty command")
        return ch.start(
            argv, self._full_env(env), cwd, stdin, OUTPUT_CAP, self._limits(), on_output, stdin_later
        )

    async def exec(
        self,
        cmd: list[str] | str,
        timeout: float = 30.0,
        env: dict[str, str] | None = None,
        cwd: str = WORKSPACE,
        stdin: bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a shell string or argv); ``on_output(stream, chunk)`` streams output as it comes."""
        oom_before = self.cg.oom_kills()
        t0 = time.perf_counter()
        job = self._start_job(cmd, env, cwd, stdin, on_output)
        return await self._finish(job, timeout, oom_before, t0)

    def prestart(self, cmd: list[str], env: dict[str, str] | None = None, cwd: str = WORKSPACE) -> Prestarted:
        """Start ``cmd`` now with its stdin held open; :meth:`Prestarted.run` sends the stdin and waits.

        For a command whose start-up is costly and independent of what it is later told (the judge's
        launcher imports pytest before it reads its job): the start-up then overlaps other work. The
        process is an ordinary command of this sandbox: ``reset``, ``restore`` and ``close`` kill it."""
        return Prestarted(self, self._start_job(cmd, env, cwd, None, None, stdin_later=True))

    async def _finish(self, job: Job, timeout: float, oom_before: int, t0: float) -> ExecResult:
        ch = self._live()
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(job.done), timeout)
        except TimeoutError:
            timed_out = True
            ch.kill_job(job.id)
            try:
                await asyncio.wait_for(job.done, self.kill_grace_s)
            except TimeoutError:
                await self._break(
                    f"the exec server did not stop a timed-out command within {self.kill_grace_s:g}s"
                )
        except asyncio.CancelledError:
            with contextlib.suppress(SandboxError):
                ch.kill_job(job.id)
            raise
        except SandboxError as e:
            if self.cg.oom_kills() > oom_before:
                raise SandboxError(
                    f"sandbox {self.id} died: the out-of-memory killer took its exec server"
                ) from None
            raise SandboxError(f"sandbox {self.id}: {e}") from None
        code, d_out, d_err, _killed = job.done.result()
        duration = (time.perf_counter() - t0) * 1000
        oom = self.cg.oom_kills() > oom_before
        if timed_out:
            code = 124
        elif oom and code == 0:
            code = 137
        return ExecResult(
            exit_code=code,
            stdout=_decode(job.out, d_out),
            stderr=_decode(job.err, d_err),
            timed_out=timed_out,
            oom_killed=oom,
            duration_ms=duration,
            truncated=bool(d_out or d_err),
        )


class Prestarted:
    """A command of a :class:`LocalSandbox` already running, waiting for its stdin (see ``prestart``)."""

    def __init__(self, sandbox: Commands, job: Job) -> None:
        self.sandbox = sandbox
        self.job = job
        self.used = False
        # An unused one dies with its sandbox: that failure is expected, not an error to report.
        job.done.add_done_callback(lambda f: f.cancelled() or f.exception())

    @property
    def alive(self) -> bool:
        """Still waiting: not used, not exited (a reset or restore kills it), its sandbox open."""
        return not self.used and not self.job.done.done() and self.sandbox.healthy

    async def run(self, stdin: bytes, timeout: float = 30.0) -> ExecResult:
        """Send ``stdin`` and wait, as ``exec`` would; ``timeout`` and ``duration_ms`` count from now."""
        if self.used:
            raise SandboxError("a prestarted command runs once")
        self.used = True
        oom_before = self.sandbox.cg.oom_kills()
        t0 = time.perf_counter()
        self.sandbox._live().feed(self.job.id, stdin)
        return await self.sandbox._finish(self.job, timeout, oom_before, t0)

    def cancel(self) -> None:
        """Kill it unused (its whole process tree), e.g. when it is no longer wanted."""
        if not self.used and not self.job.done.done():
            self.used = True
            with contextlib.suppress(SandboxError):
                self.sandbox._live().kill_job(self.job.id)
