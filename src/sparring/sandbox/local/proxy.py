"""The allowlist proxy: the only way out of a sandbox with ``network="allowlist"``.

The sandbox has its own network namespace with loopback only. Inside it, the
exec server listens on ``127.0.0.1:PROXY_PORT`` and relays each connection
over a Unix socket bind-mounted from the host; ``HTTP(S)_PROXY`` point there.
On the host, this proxy speaks HTTP proxy protocol (``CONNECT host:port`` for
TLS and anything tunnelled, absolute-URI requests for plain HTTP), lets
through only the allowlisted hosts, and logs every attempt, allowed or not,
so the judge can flag network attempts. It fails closed: when the proxy is
not running, the relay answers 502 and nothing leaves the sandbox. Proxy
variables alone are not the isolation: without this socket there is no
route out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

PROXY_PORT = 3128
HEAD_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Attempt:
    """One connection the sandbox tried to make through the proxy."""

    host: str
    port: int
    allowed: bool
    at: float


def parse_allow(entries: tuple[str, ...] | list[str]) -> set[tuple[str, int | None]]:
    """``host`` (any port) or ``host:port`` entries, lowercased."""
    out: set[tuple[str, int | None]] = set()
    for e in entries:
        host, sep, port = e.strip().lower().rpartition(":")
        if sep and port.isdigit() and host:
            out.add((host.strip("[]"), int(port)))
        else:
            out.add((e.strip().lower().strip("[]"), None))
    return out


def _split_hostport(s: str, default_port: int) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    if sep and port.isdigit() and not host.endswith("]") and "]" not in port:
        return host.strip("[]").lower(), int(port)
    return s.strip("[]").lower(), default_port


@dataclass
class AllowlistProxy:
    """An HTTP proxy on a Unix socket that connects only to allowlisted hosts."""

    socket_path: Path
    allow: set[tuple[str, int | None]]
    connect_timeout: float = 10.0
    attempts: list[Attempt] = field(default_factory=list)
    _server: asyncio.AbstractServer | None = None

    def allowed(self, host: str, port: int) -> bool:
        return (host, port) in self.allow or (host, None) in self.allow

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._handle, path=str(self.socket_path))
        self.socket_path.chmod(0o666)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        if len(head) > HEAD_LIMIT:
            writer.close()
            return
        line, _, rest = head.partition(b"\r\n")
        parts = line.decode("latin-1").split()
        if len(parts) != 3:
            await self._refuse(writer, 400, "malformed request line")
            return
        method, target, version = parts
        if method.upper() == "CONNECT":
            host, port = _split_hostport(target, 443)
            forward = b""
        elif target.startswith("http://"):
            hostport, _, path = target[len("http://") :].partition("/")
            host, port = _split_hostport(hostport, 80)
            forward = f"{method} /{path} {version}\r\n".encode("latin-1") + rest
        else:
            await self._refuse(writer, 400, "only CONNECT and absolute http:// requests are proxied")
            return
        ok = self.allowed(host, port)
        self.attempts.append(Attempt(host, port, ok, time.time()))
        if not ok:
            await self._refuse(writer, 403, f"{host}:{port} is not in the sandbox's network allowlist")
            return
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(host, port), self.connect_timeout)
        except (OSError, TimeoutError) as e:
            await self._refuse(writer, 502, f"cannot reach {host}:{port}: {e}")
            return
        if forward:
            up_w.write(forward)
        else:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer), return_exceptions=True)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        finally:
            with contextlib.suppress(Exception):
                if dst.can_write_eof():
                    dst.write_eof()
                else:
                    dst.close()

    @staticmethod
    async def _refuse(writer: asyncio.StreamWriter, code: int, why: str) -> None:
        reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[code]
        body = (why + "\n").encode()
        writer.write(
            f"HTTP/1.1 {code} {reason}\r\nX-Sparring: {why}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(Exception):
            await writer.drain()
        writer.close()
