"""Importing an image from a file: a ``docker save`` tar, an ``oci-archive`` tar, or an OCI layout directory.

Archives are read member by member, never extracted: only the members the index or manifest names
are read, by exact name, and every blob is verified against its digest as it enters the store (a
``docker save`` layer's digest is computed, and a manifest made for it, so the image has an OCI
manifest and a digest like any pulled image).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from sparring.errors import ImageError, SparringError
from sparring.images.reference import parse
from sparring.images.registry import host_platform
from sparring.images.store import INDEX_TYPES, ImageRecord, ImageStore

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


class _Source:
    """Files of an archive or a directory, by their name inside it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tar: tarfile.TarFile | None = None
        self.members: dict[str, tarfile.TarInfo] = {}
        if path.is_file():
            try:
                self.tar = tarfile.open(path, "r:*")  # noqa: SIM115 - closed by close()
            except tarfile.TarError as e:
                raise ImageError(
                    f"{path} is not a tar archive ({e}): give a docker save tar, an oci-archive or an OCI layout dir"
                ) from None
            for m in self.tar.getmembers():
                if m.isreg():
                    self.members[m.name.removeprefix("./")] = m

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()

    def has(self, name: str) -> bool:
        if self.tar is not None:
            return name in self.members
        p = self._dir_path(name)
        return p is not None and p.is_file() and not p.is_symlink()

    def _dir_path(self, name: str) -> Path | None:
        parts = [x for x in name.split("/") if x not in ("", ".")]
        if not parts or ".." in parts or name.startswith("/"):
            return None
        return self.path.joinpath(*parts)

    def open(self, name: str) -> IO[bytes]:
        if self.tar is not None:
            m = self.members.get(name)
            f = self.tar.extractfile(m) if m is not None else None
            if f is None:
                raise ImageError(f"{self.path}: {name} is missing from the archive")
            return f
        p = self._dir_path(name)
        if p is None or not p.is_file() or p.is_symlink():
            raise ImageError(f"{self.path}: {name} is missing or not a plain file")
        return open(p, "rb")

    def read(self, name: str, limit: int = 16 << 20) -> bytes:
        with self.open(name) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise ImageError(f"{self.path}: {name} is larger than {limit} bytes: refused")
        return data

    def chunks(self, name: str) -> Iterator[bytes]:
        with self.open(name) as f:
            while data := f.read(1 << 20):
                yield data

    def digest_of(self, name: str) -> tuple[str, int]:
        h, n = hashlib.sha256(), 0
        for c in self.chunks(name):
            h.update(c)
            n += len(c)
        return "sha256:" + h.hexdigest(), n


def _blob_name(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64:
        raise ImageError(f"digest {digest!r} is not sha256: only sha256 blobs are supported")
    return f"blobs/sha256/{hexpart}"


def _import_oci(src: _Source, store: ImageStore, tag: str | None) -> tuple[str, list[str]]:
    index = json.loads(src.read("index.json"))
    entries = index.get("manifests") or []
    if not entries:
        raise ImageError(f"{src.path}: its index.json lists no image")
    pick = entries[0]
    if len(entries) > 1:
        named = (
            [e for e in entries if (e.get("annotations") or {}).get(REF_NAME) in (tag, None)] if tag else []
        )
        pick = named[0] if len(named) == 1 else None
        if pick is None:
            names = [(e.get("annotations") or {}).get(REF_NAME, e.get("digest")) for e in entries]
            raise ImageError(
                f"{src.path} holds {len(entries)} images ({', '.join(map(str, names))}): import one with --tag NAME"
            )
    digest = str(pick["digest"])
    data = src.read(_blob_name(digest))
    doc = json.loads(data)
    if doc.get("mediaType") in INDEX_TYPES or "manifests" in doc:
        want = host_platform()
        for m in doc.get("manifests") or []:
            p = m.get("platform") or {}
            if (p.get("os"), p.get("architecture")) == want:
                digest = str(m["digest"])
                break
        else:
            raise ImageError(f"{src.path}: no {want[0]}/{want[1]} image in its index")
        data = src.read(_blob_name(digest))
        doc = json.loads(data)
    store.put_blob_bytes(data, digest)
    for d in [doc["config"]["digest"], *(lay["digest"] for lay in doc.get("layers") or [])]:
        if not store.has_blob(d):
            store.put_blob_stream(d, src.chunks(_blob_name(d)))
    refs = []
    ann = (pick.get("annotations") or {}).get(REF_NAME, "")
    if tag:
        refs.append(tag)
    elif ann and (":" in ann or "/" in ann):
        refs.append(ann)
    return digest, refs


def _import_docker(src: _Source, store: ImageStore, tag: str | None) -> tuple[str, list[str]]:
    entries = json.loads(src.read("manifest.json"))
    if not isinstance(entries, list) or not entries:
        raise ImageError(f"{src.path}: its manifest.json lists no image")
    if len(entries) > 1 and not tag:
        raise ImageError(f"{src.path} holds {len(entries)} images: import one with --tag NAME")
    entry = entries[0]
    if tag and len(entries) > 1:
        want = str(parse(tag))
        hits = [e for e in entries if want in {str(parse(t)) for t in e.get("RepoTags") or []}]
        if len(hits) != 1:
            raise ImageError(f"{src.path}: no single image tagged {tag}")
        entry = hits[0]
    config = src.read(entry["Config"])
    cfg_digest = store.put_blob_bytes(config)
    layers = []
    for name in entry.get("Layers") or []:
        d, size = src.digest_of(name)
        store.put_blob_stream(d, src.chunks(name))
        with src.open(name) as f:
            gz = f.read(2) == b"\x1f\x8b"
        layers.append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gz else ""),
                "digest": d,
                "size": size,
            }
        )
    manifest = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": cfg_digest, "size": len(config)}, "layers": layers,
    }  # fmt: skip
    digest = store.put_blob_bytes(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    return digest, [tag] if tag else list(entry.get("RepoTags") or [])


def import_archive(
    store: ImageStore, path: Path, tag: str | None = None, status: Callable[[str], None] | None = None,
    source: str | None = None,
) -> ImageRecord:  # fmt: skip
    """Import the image at ``path`` (tagged ``tag`` when given) and make its root."""
    if tag is not None:
        parse(tag)  # a bad tag is refused before anything is read
    if not path.exists():
        raise ImageError(
            f"{path} does not exist: give a docker save tar, an oci-archive or an OCI layout dir"
        )
    src = _Source(path)
    try:
        if src.has("index.json") and (src.has("oci-layout") or not src.has("manifest.json")):
            digest, refs = _import_oci(src, store, tag)
        elif src.has("manifest.json"):
            digest, refs = _import_docker(src, store, tag)
        else:
            raise ImageError(
                f"{path} has neither index.json (OCI) nor manifest.json (docker save): not an image archive"
            )
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, SparringError):
            raise
        raise ImageError(f"{path}: malformed image metadata ({e!r})") from None
    finally:
        src.close()
    return store.add_image(digest, source=source or str(path), refs=refs, progress=status)
