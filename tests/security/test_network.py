"""No network reaches the host: not its loopback listeners, not its abstract Unix sockets.

``network="loopback"`` means the sandbox's *own* loopback: a listener inside
is reachable from inside, the host's 127.0.0.1 is not.
"""

from __future__ import annotations

import socket
import threading
import uuid

import pytest
from sec_support import in_sandbox

from sparring.sandbox.base import SandboxSpec
from tests_support import HANG_S, wait_until

PROBE = """
import socket, sys
port, abstract = int(sys.argv[1]), sys.argv[2]
def tcp(host, p):
    try:
        s = socket.create_connection((host, p), timeout=2)
        s.sendall(b"hello from the sandbox"); s.close()
        return "connected"
    except OSError as e:
        return type(e).__name__
def unix(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect("\\0" + name); s.sendall(b"hello"); return "connected"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
# the sandbox's own loopback, as a control (with network="none" it may be down altogether)
try:
    own = socket.socket(); own.bind(("127.0.0.1", 0)); own.listen(1)
    print("own", tcp("127.0.0.1", own.getsockname()[1]))
except OSError as e:
    print("own", type(e).__name__)
print("host-tcp", tcp("127.0.0.1", port))
print("host-tcp6", tcp("::1", port))
print("host-abstract", unix(abstract))
"""


class HostListeners:
    """A TCP listener on the host's 127.0.0.1 and an abstract Unix socket; both count connections."""

    def __init__(self) -> None:
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.port = self.tcp.getsockname()[1]
        self.abstract_name = f"sparring-sec-{uuid.uuid4().hex}"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind("\0" + self.abstract_name)
        self.unix.listen(8)
        self.accepted: list[str] = []
        self.threads = [
            threading.Thread(target=self._serve, args=(s,), daemon=True) for s in (self.tcp, self.unix)
        ]
        for t in self.threads:
            t.start()

    def _serve(self, s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            self.accepted.append(repr(conn.getsockname()))
            conn.close()

    def close(self) -> None:
        for s in (self.tcp, self.unix):
            s.shutdown(socket.SHUT_RDWR)
            s.close()


@pytest.fixture
def host_listeners():
    h = HostListeners()
    # control: the listeners work from the host
    socket.create_connection(("127.0.0.1", h.port), timeout=2).close()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect("\0" + h.abstract_name)
    c.close()
    yield h
    h.close()


@pytest.mark.parametrize("network", ["none", "loopback"])
def test_host_loopback_and_abstract_sockets_are_unreachable(backend, host_listeners, network):
    # the two control connections have been accepted (by the listeners' threads: wait for them)
    assert wait_until(lambda: len(host_listeners.accepted) == 2)

    async def body(sb):
        return await sb.exec(
            ["python3", "-c", PROBE, str(host_listeners.port), host_listeners.abstract_name], timeout=HANG_S
        )

    r = in_sandbox(backend, SandboxSpec(network=network), body)
    assert r.exit_code == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert set(lines) == {"own", "host-tcp", "host-tcp6", "host-abstract"}, (
        r.stdout
    )  # the probe ran to its end
    if network == "loopback":
        assert lines["own"] == "connected"  # the probe's sockets work: the refusals below are isolation
    assert lines["host-tcp"] != "connected"
    assert lines["host-tcp6"] != "connected"
    assert lines["host-abstract"] != "connected"
    assert len(host_listeners.accepted) == 2  # nothing from the sandbox arrived


def test_no_network_interface_but_loopback(backend):
    async def body(sb):
        return await sb.exec("cat /proc/net/dev; ls /sys/class/net 2>/dev/null; cat /proc/net/route")

    r = in_sandbox(backend, SandboxSpec(network="loopback"), body)
    ifaces = [line.split(":")[0].strip() for line in r.stdout.splitlines() if ":" in line]
    assert ifaces == ["lo"], r.stdout
    route_lines = [line for line in r.stdout.splitlines() if line.startswith(("Iface", "lo", "eth", "en"))]
    assert all(not line.startswith(("eth", "en")) for line in route_lines)
