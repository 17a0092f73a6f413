"""Registry authentication as Docker Hub and GHCR do it: a 401 with a Bearer challenge, a token from the
realm (asked with the basic credentials of the docker config), then the request again with the token.
A real token gate (an HTTP server on loopback) stands in front of Debian's docker-registry."""

from __future__ import annotations

import base64
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from image_support import entry, push, registry, tar_bytes, write_layout

from sparring.errors import ImageError
from sparring.images.registry import pull
from sparring.images.store import ImageStore

USER, PASSWORD, TOKEN = "agent", "s3cret", "tok-123"


class Gate:
    """Bearer-token front of ``upstream``: /token hands out TOKEN for the right basic credentials."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.token_requests: list[str] = []
        self.authorized = 0
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                auth = self.headers.get("Authorization", "")
                if self.path.startswith("/token"):
                    gate.token_requests.append(auth)
                    ok = auth == "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                    body = json.dumps({"token": TOKEN}).encode() if ok else b"{}"
                    self.send_response(200 if ok else 401)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if auth != f"Bearer {TOKEN}":
                    host = self.headers.get("Host")
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", f'Bearer realm="http://{host}/token",service="gate"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                gate.authorized += 1
                r = httpx.get(
                    f"http://{gate.upstream}{self.path}",
                    headers={"Accept": self.headers.get("Accept", "*/*")},
                )
                self.send_response(r.status_code)
                for k in ("Content-Type", "Docker-Content-Digest"):
                    if k in r.headers:
                        self.send_header(k, r.headers[k])
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def gate(tmp_path_factory) -> Iterator[Gate]:
    work = tmp_path_factory.mktemp("auth")
    write_layout(
        work / "layout",
        [tar_bytes([entry("etc/", tarfile.DIRTYPE), entry("etc/motd", data=b"behind a gate\n")])],
    )
    with registry(work / "registry") as host:
        push(work / "layout", f"{host}/private/app:1")
        g = Gate(host)
        try:
            yield g
        finally:
            g.close()


def _docker_config(d: Path, registry_host: str, user: str, password: str) -> Path:
    d.mkdir()
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (d / "config.json").write_text(json.dumps({"auths": {registry_host: {"auth": auth}}}))
    return d


def test_bearer_token_with_docker_config_credentials(gate, tmp_path, monkeypatch):
    monkeypatch.setenv(
        "DOCKER_CONFIG", str(_docker_config(tmp_path / "docker", gate.address, USER, PASSWORD))
    )
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    store = ImageStore(tmp_path / "images")
    res = pull(store, f"{gate.address}/private/app:1", insecure=True)
    assert (store.root_dir(res.digest) / "etc" / "motd").read_text() == "behind a gate\n"
    assert (
        gate.authorized >= 3
    )  # manifest, config, layer: each with the token (the control: the gate let them in)


def test_wrong_or_missing_credentials_are_one_line_errors(gate, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_config(tmp_path / "docker", gate.address, USER, "wrong")))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    store = ImageStore(tmp_path / "images")
    with pytest.raises(ImageError, match="token request failed") as e:
        pull(store, f"{gate.address}/private/app:1", insecure=True)
    assert "\n" not in str(e.value) and store.records() == []
