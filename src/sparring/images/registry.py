"""Pulling an image from a registry that speaks the OCI distribution API (Docker Hub, GHCR, a local one).

``pull`` fetches the manifest by tag or digest (an index or manifest list picks this host's platform,
linux/amd64 on x86-64), then the config and every layer blob not already in the store, each streamed
to a temp file and verified against its digest before it becomes visible (store.py). Authentication:
basic credentials from the docker config (auth.py) and the bearer-token dance a registry asks for in
its ``WWW-Authenticate`` challenge. Plain HTTP only with ``insecure`` and only to a loopback registry.
"""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx

from sparring.errors import ImageError
from sparring.images.auth import credentials_for
from sparring.images.reference import Reference, is_loopback_host, parse
from sparring.images.store import INDEX_TYPES, MANIFEST_TYPES, ImageRecord, ImageStore, sha256_hex

ACCEPT = ", ".join((*MANIFEST_TYPES, *INDEX_TYPES))
TIMEOUT = httpx.Timeout(30.0, read=120.0)
MAX_MANIFEST = 4 << 20
ByteProgress = Callable[[str, int, int], None]
"""(what, bytes done, bytes total) for a progress display."""


def host_platform() -> tuple[str, str]:
    m = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(m, m)
    return "linux", arch


@dataclass(frozen=True)
class PullResult:
    ref: str
    digest: str
    layers: int
    size_bytes: int
    record: ImageRecord
    index_digest: str | None = None
    """The multi-platform index the reference named, whose entry for this host's platform is ``digest``."""


class RegistryClient:
    """One registry's distribution API for one repository, with its auth."""

    def __init__(self, ref: Reference, insecure: bool = False) -> None:
        if insecure and not is_loopback_host(ref.registry):
            raise ImageError(
                f"--insecure (plain HTTP) is only allowed to a loopback registry, not {ref.registry}: "
                "use HTTPS for remote registries"
            )
        self.ref = ref
        self.base = f"{'http' if insecure else 'https'}://{ref.api_host}/v2/{ref.repository}"
        self.basic = credentials_for(ref.registry)
        self.token: str | None = None
        self.http = httpx.Client(timeout=TIMEOUT, follow_redirects=True)

    def close(self) -> None:
        self.http.close()

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        h = dict(extra or {})
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        elif self.basic:
            h["Authorization"] = f"Basic {self.basic}"
        return h

    def _authenticate(self, challenge: str) -> None:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if not self.basic:
                raise ImageError(
                    f"registry {self.ref.registry} wants a login: docker login {self.ref.registry} (or podman login)"
                )
            return
        if scheme.lower() != "bearer":
            raise ImageError(
                f"registry {self.ref.registry} asks for {scheme!r} authentication, which is not supported"
            )
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        realm = fields.get("realm")
        if not realm:
            raise ImageError(f"registry {self.ref.registry} sent a bearer challenge without a realm")
        query = {
            "service": fields.get("service", ""),
            "scope": fields.get("scope", f"repository:{self.ref.repository}:pull"),
        }
        headers = {"Authorization": f"Basic {self.basic}"} if self.basic else {}
        r = self.http.get(realm, params=query, headers=headers)
        if r.status_code != 200:
            raise ImageError(
                f"registry {self.ref.registry}: token request failed (HTTP {r.status_code}): check your login for {self.ref.name}"
            )
        body = r.json()
        self.token = body.get("token") or body.get("access_token")
        if not self.token:
            raise ImageError(f"registry {self.ref.registry}: the token service answered without a token")

    def _get(self, path: str, headers: dict[str, str] | None = None, stream: bool = False) -> httpx.Response:
        url = f"{self.base}/{path}"
        for attempt in range(2):
            try:
                req = self.http.build_request("GET", url, headers=self._headers(headers))
                r = self.http.send(req, stream=stream)
            except httpx.HTTPError as e:
                raise ImageError(
                    f"registry {self.ref.registry} cannot be reached ({e}): check the name and network"
                ) from None
            if r.status_code == 401 and attempt == 0:
                challenge = r.headers.get("www-authenticate", "")
                r.close()
                self._authenticate(challenge)
                continue
            if r.status_code == 404:
                r.close()
                raise ImageError(
                    f"{self.ref}: not found in registry {self.ref.registry} ({path.split('/')[0]} {path.split('/')[-1]})"
                )
            if r.status_code >= 400:
                r.close()
                raise ImageError(f"{self.ref}: registry answered HTTP {r.status_code} for {path}")
            return r
        raise ImageError(f"{self.ref}: registry {self.ref.registry} refused the credentials (HTTP 401)")

    def manifest(self, target: str) -> tuple[bytes, str]:
        r = self._get(f"manifests/{target}", {"Accept": ACCEPT})
        data = r.content
        if len(data) > MAX_MANIFEST:
            raise ImageError(f"{self.ref}: manifest of {len(data)} bytes is too large: refused")
        mt = r.headers.get("content-type", "").split(";")[0].strip()
        return data, mt

    def blob_chunks(self, digest: str, progress: Callable[[int], None] | None = None) -> Iterator[bytes]:
        r = self._get(f"blobs/{digest}", stream=True)
        try:
            for chunk in r.iter_bytes(1 << 20):
                if progress:
                    progress(len(chunk))
                yield chunk
        finally:
            r.close()


def _pick_platform(index: dict[str, object], ref: Reference) -> str:
    want_os, want_arch = host_platform()
    found = []
    for m in index.get("manifests") or []:  # type: ignore[attr-defined]
        p = m.get("platform") or {}
        found.append(f"{p.get('os')}/{p.get('architecture')}")
        if p.get("os") == want_os and p.get("architecture") == want_arch:
            return str(m["digest"])
    raise ImageError(f"{ref} has no {want_os}/{want_arch} image (it has: {', '.join(found) or 'none'})")


def pull(
    store: ImageStore, ref_text: str, insecure: bool = False, progress: ByteProgress | None = None,
    status: Callable[[str], None] | None = None,
) -> PullResult:  # fmt: skip
    """Pull ``ref_text`` into ``store``; the image's root is ready when it returns."""
    ref = parse(ref_text)
    client = RegistryClient(ref, insecure)
    try:
        data, mt = client.manifest(ref.target)
        top_digest = "sha256:" + sha256_hex(data)
        if ref.digest and top_digest != ref.digest:
            raise ImageError(f"{ref}: the registry sent a manifest with digest {top_digest}: refused")
        doc = json.loads(data)
        mt = doc.get("mediaType") or mt
        index_digest = None
        if mt in INDEX_TYPES or "manifests" in doc:
            index_digest = top_digest
            digest = _pick_platform(doc, ref)
            data, mt = client.manifest(digest)
            if "sha256:" + sha256_hex(data) != digest:
                raise ImageError(f"{ref}: platform manifest does not match its digest {digest}: refused")
            doc = json.loads(data)
        else:
            digest = top_digest
        if "schemaVersion" in doc and doc["schemaVersion"] == 1:
            raise ImageError(
                f"{ref}: a docker schema 1 manifest (deprecated): push the image again with a current tool"
            )
        store.put_blob_bytes(data, digest)
        cfg = doc["config"]
        if not store.has_blob(cfg["digest"]):
            store.put_blob_stream(
                cfg["digest"], client.blob_chunks(cfg["digest"]), int(cfg.get("size") or MAX_MANIFEST)
            )
        layers = doc.get("layers") or []
        for i, lay in enumerate(layers):
            d, size = lay["digest"], int(lay.get("size") or 0)
            if store.has_blob(d):
                continue
            what = f"layer {i + 1}/{len(layers)} {d[7:19]}"
            done = 0

            def tick(n: int, what: str = what, size: int = size) -> None:
                nonlocal done
                done += n
                if progress:
                    progress(what, done, size)

            store.put_blob_stream(d, client.blob_chunks(d, tick), size or None)
        pinned = str(ref.with_digest(digest)) if not ref.digest else str(ref)
        refs = [str(ref)]  # a tag, or a digest of an index that names this platform's manifest
        rec = store.add_image(digest, source=pinned, refs=refs, progress=status)
        return PullResult(
            ref=str(ref),
            digest=digest,
            layers=len(rec.layers),
            size_bytes=rec.size_bytes,
            record=rec,
            index_digest=index_digest,
        )
    finally:
        client.close()
