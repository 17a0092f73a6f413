"""Open a local page in headless Chromium (Debian's `chromium`) as a person would, and record what it did.

Every request the page makes is routed to a loopback proxy that only counts connections and
answers nothing, so "fetched nothing from the network" is a number (the positive control in
test_report_pages.py shows a remote image is counted). Console messages (errors, CSP
violations) come from Chromium's log on stderr.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

# No background traffic of Chromium's own (updates, sync, safe browsing): only the page's requests count.
QUIET = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
         "--disable-extensions", "--disable-breakpad", "--metrics-recording-only", "--no-default-browser-check",
         "--hide-scrollbars", "--disable-client-side-phishing-detection", "--disable-domain-reliability",
         "--no-pings", "--disable-field-trial-config", "--variations-server-url=http://127.0.0.1:9/",
         "--disable-features=Translate,OptimizationHints,MediaRouter,NetworkTimeServiceQuerying,"
         "AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions,"
         "PrivacySandboxSettings4,SafeBrowsing,SigninInterceptBubble,DialMediaRouteProvider"]  # fmt: skip


class CountingProxy:
    """A loopback TCP listener that records each connection's first line and closes it (a proxy that
    serves nothing). Each connection is read on its own thread, so one slow client cannot hold up the
    count of the next."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.requests: list[str] = []  # each connection's first line (CONNECT host:443 / GET url)
        # Connections closed without sending a byte: Chromium opens these to its proxy ahead of need
        # (preconnect) and drops them at exit, more often on a loaded machine. No request was made on
        # them, so nothing was fetched; they are kept apart from `requests`, not dropped silently.
        self.silent = 0
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stop = False
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._stop:
                conn.close()
                return
            self.connections += 1
            r = threading.Thread(target=self._read, args=(conn,), daemon=True)
            self._readers.append(r)
            r.start()

    def _read(self, conn: socket.socket) -> None:
        conn.settimeout(30)  # the browser has exited before close() joins us, so EOF comes at once
        try:
            first = conn.recv(512)
        except OSError:
            first = b"?"  # a connection that neither spoke nor closed: counted, to be safe
        finally:
            conn.close()
        with self._lock:
            if first:
                self.requests.append(first.split(b"\r\n", 1)[0].decode(errors="replace") or "?")
            else:
                self.silent += 1

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):  # wake the accept()
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        self.sock.close()
        self._t.join(timeout=5)
        for r in self._readers:
            r.join(timeout=35)


# Hosts Chromium itself talks to, whatever the page (sign-in, connectivity and time checks,
# component updates) and that the flags above do not all silence: not counted as the page's requests.
BROWSER_HOSTS = re.compile(r"^(accounts|www|clients\d*|update)\.google(apis)?\.com$|\.gvt1\.com$")


def _host(first_line: str) -> str:
    """The host of a proxied request's first line (``CONNECT h:443 ...`` or ``GET http://h/...``)."""
    parts = first_line.split()
    target = parts[1] if len(parts) > 1 else ""
    return urlsplit(target if "//" in target else f"//{target}").hostname or ""


@dataclass
class Visit:
    dom: str
    console: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)  # the page's requests (Chromium's own left out)
    silent: int = 0  # proxy connections that closed without sending a request (preconnects)

    @property
    def requests(self) -> int:
        return len(self.urls)


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: run `make setup` (the report tests open pages headless)")
    return exe


def _run(args: list[str], proxy: CountingProxy) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium(), *QUIET, f"--user-data-dir={profile}", f"--proxy-server=http://127.0.0.1:{proxy.port}",
               "--proxy-bypass-list=<-loopback>", *args]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def visit(page: Path, screenshots: dict[str, tuple[int, int]] | None = None, query: str = "") -> Visit:
    """The page's DOM after its scripts ran, its console lines and its request count; with
    ``screenshots`` ({png path: (width, height)}) also pictures of it at those window sizes."""
    proxy = CountingProxy()
    try:
        url = page.resolve().as_uri() + (f"?{query}" if query else "")
        r = _run(["--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000", "--dump-dom", url], proxy)
        assert r.returncode == 0, r.stderr[-2000:]
        console = [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln]
        for png, (w, h) in (screenshots or {}).items():
            png.parent.mkdir(parents=True, exist_ok=True)
            s = _run([f"--window-size={w},{h}", f"--screenshot={png}", url], proxy)
            assert s.returncode == 0 and png.is_file() and png.stat().st_size > 5000, s.stderr[-2000:]
    finally:
        proxy.close()
    page_requests = [u for u in proxy.requests if not BROWSER_HOSTS.search(_host(u))]
    return Visit(r.stdout, console, page_requests, proxy.silent)
