"""The image store: content-addressed blobs, unpacked layers and image roots under one directory.

Layout of ``$SPARRING_IMAGE_ROOT`` (default ``~/.cache/sparring/images``)::

    blobs/sha256/<hex>          manifests, configs and layer blobs, each verified against its digest
    layers/sha256/<hex>/        one unpacked layer (by its blob's digest): root/ and meta.json
    roots/sha256/<hex>/         an image's layers flattened and prepared as a sandbox's / (by manifest)
    images/<hex>.json           an :class:`ImageRecord` (what list / inspect show)
    refs.json                   reference -> image digest (tags you pulled, imported or built)
    locks/                      one lock file per layer and per root being made
    tmp/                        work in progress, named by the pid that makes it

Everything appears by ``rename`` once complete: a blob after its digest is checked, a layer or root
after it is unpacked, a record after its root is ready, a reference after its record. So an
interrupted pull or import leaves nothing half-visible (``gc`` removes the leftovers in tmp/), and
two processes making the same layer at once serialise on its lock, the second finding it done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from sparring.errors import ImageError
from sparring.filelock import locked
from sparring.images.flatten import flatten
from sparring.images.reference import is_digest, parse
from sparring.images.runtime import ImageConfig, prepare
from sparring.images.unpack import Limits, remove_at, unpack_layer
from sparring.pids import pid_alive

ROOT_ENV = "SPARRING_IMAGE_ROOT"
ROOT_FORMAT = "2"  # bump when prepare() changes what a root holds: old roots are then made anew
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
Progress = Callable[[str], None]


def default_root() -> Path:
    raw = os.environ.get(ROOT_ENV, "").strip()
    if raw:
        return Path(raw)
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache) / "sparring" / "images"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class LayerRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    media_type: str
    size: int
    diff_id: str = ""


class ImageRecord(BaseModel):
    """One image in the store."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    """The manifest's digest: the image's identity (what a pinned reference names)."""
    config_digest: str
    layers: tuple[LayerRecord, ...]
    size_bytes: int
    """Manifest, config and layer blobs together (compressed, as stored)."""
    env: dict[str, str]
    working_dir: str
    user: str = ""
    architecture: str = ""
    os: str = ""
    source: str = ""
    """Where it came from: the reference pulled, the archive imported, the context built."""
    created: float = 0.0

    @property
    def config(self) -> ImageConfig:
        return ImageConfig(env=dict(self.env), working_dir=self.working_dir, user=self.user)


class ImageStore:
    """Blobs, layers and roots of images under ``root`` (see the module docstring for the layout)."""

    def __init__(self, root: Path | None = None, limits: Limits | None = None) -> None:
        self.root = Path(root or default_root()).absolute()
        self.limits = limits or Limits.from_env()
        for d in ("blobs/sha256", "layers/sha256", "roots/sha256", "images", "locks", "tmp"):
            (self.root / d).mkdir(parents=True, exist_ok=True, mode=0o755)

    # ---------- blobs ----------
    def blob_path(self, digest: str) -> Path:
        if not is_digest(digest):
            raise ImageError(f"{digest!r} is not a sha256 digest")
        return self.root / "blobs/sha256" / digest.split(":", 1)[1]

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def temp_path(self, what: str) -> Path:
        """A fresh path in tmp/ named by this process (gc removes it if the process dies)."""
        return self.root / "tmp" / f"{os.getpid()}-{uuid.uuid4().hex[:12]}-{what}"

    def put_blob_stream(self, digest: str, chunks: Iterable[bytes], max_size: int | None = None) -> Path:
        """Write ``chunks`` as blob ``digest``: to a temp file, verified, then renamed into place."""
        dst = self.blob_path(digest)
        if dst.is_file():
            return dst
        tmp = self.temp_path("blob")
        h, n = hashlib.sha256(), 0
        try:
            with open(tmp, "wb") as f:
                for c in chunks:
                    n += len(c)
                    if max_size is not None and n > max_size:
                        raise ImageError(
                            f"blob {digest} is larger than the {max_size} bytes its manifest says: refused"
                        )
                    h.update(c)
                    f.write(c)
            got = "sha256:" + h.hexdigest()
            if got != digest:
                raise ImageError(
                    f"blob {digest} arrived as {got}: its content does not match its digest; pull again"
                )
            os.chmod(tmp, 0o644)
            os.replace(tmp, dst)
        finally:
            tmp.unlink(missing_ok=True)
        return dst

    def put_blob_bytes(self, data: bytes, digest: str | None = None) -> str:
        d = digest or "sha256:" + sha256_hex(data)
        self.put_blob_stream(d, [data])
        return d

    def read_blob(self, digest: str) -> bytes:
        return b"".join(self.read_blob_chunks(digest, size=1 << 30))

    def read_blob_chunks(self, digest: str, size: int = 16 << 20) -> Iterator[bytes]:
        """Blob ``digest`` in pieces of at most ``size`` bytes (a layer of gigabytes is never in memory
        whole). Raises :class:`ImageError` at once when the store does not hold it."""
        p = self.blob_path(digest)
        try:
            f = open(p, "rb")  # noqa: SIM115 (closed by the generator below)
        except FileNotFoundError:
            raise ImageError(
                f"blob {digest} is not in the image store {self.root}: pull or import the image again"
            ) from None

        def pieces() -> Iterator[bytes]:
            with f:
                while data := f.read(size):
                    yield data

        return pieces()

    # ---------- layers and roots ----------
    def layer_dir(self, digest: str) -> Path:
        return self.root / "layers/sha256" / digest.split(":", 1)[1]

    def unpack(self, layer: LayerRecord, where: str) -> tuple[Path, set[str], str]:
        """The unpacked layer (made once, under the layer's lock): its root, implicit dirs and diff_id."""
        d = self.layer_dir(layer.digest)
        with locked(self.root / "locks" / f"layer-{d.name}.lock"):
            meta = d / "meta.json"
            if not meta.is_file():
                tmp = self.temp_path("layer")
                tmp.mkdir(mode=0o755)
                try:
                    (tmp / "root").mkdir(mode=0o755)
                    stats = unpack_layer(self.blob_path(layer.digest), tmp / "root", self.limits, where)
                    if layer.diff_id and stats.diff_id != layer.diff_id:
                        raise ImageError(
                            f"{where}: its uncompressed content is {stats.diff_id}, the config says "
                            f"{layer.diff_id}: refused (a tampered or broken image)"
                        )
                    (tmp / "meta.json").write_text(
                        json.dumps(
                            {
                                "diff_id": stats.diff_id,
                                "files": stats.files,
                                "bytes": stats.bytes,
                                "skipped_devices": stats.skipped_devices,
                                "implicit_dirs": sorted(stats.implicit_dirs),
                            }
                        )  # fmt: skip
                    )
                    if d.exists():  # a leftover without meta.json (an older crash): replace it
                        self._remove(d)
                    os.rename(tmp, d)
                finally:
                    if tmp.exists():
                        self._remove(tmp)
            info = json.loads(meta.read_text())
        return d / "root", set(info["implicit_dirs"]), info["diff_id"]

    def root_dir(self, digest: str) -> Path:
        return self.root / "roots/sha256" / digest.split(":", 1)[1]

    def rootfs(self, rec: ImageRecord, progress: Progress | None = None) -> Path:
        """The image's prepared root (layers unpacked and flattened once, under the root's lock)."""
        d = self.root_dir(rec.digest)
        done = d / ".sparring" / f"root-format-{ROOT_FORMAT}"
        if done.is_file():
            return d
        with locked(self.root / "locks" / f"root-{d.name}.lock"):
            if done.is_file():
                return d
            layers = []
            for i, layer in enumerate(rec.layers):
                if progress:
                    progress(f"unpacking layer {i + 1}/{len(rec.layers)} {layer.digest[:19]}")
                layers.append(self.unpack(layer, f"layer {i + 1} ({layer.digest[:19]})"))
            if progress:
                progress("flattening layers")
            tmp = self.temp_path("root")
            tmp.mkdir(mode=0o755)
            try:
                flatten(layers, tmp)
                prepare(tmp, rec.config.path)
                (tmp / ".sparring" / f"root-format-{ROOT_FORMAT}").write_text(rec.digest + "\n")
                os.chmod(tmp, 0o755)
                if d.exists():
                    self._remove(d)
                os.rename(tmp, d)
            finally:
                if tmp.exists():
                    self._remove(tmp)
        return d

    def _remove(self, path: Path) -> None:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            remove_at(fd, path.name)
        finally:
            os.close(fd)

    # ---------- images and references ----------
    def add_image(
        self, manifest_digest: str, source: str, refs: Iterable[str] = (), progress: Progress | None = None
    ) -> ImageRecord:
        """Record the image whose manifest (and config and layers) are in the store, make its root,
        and point ``refs`` at it. The record is written only once the root is ready."""
        manifest = json.loads(self.read_blob(manifest_digest))
        mt = manifest.get("mediaType") or MANIFEST_TYPES[0]
        if mt not in MANIFEST_TYPES or "config" not in manifest:
            raise ImageError(
                f"manifest {manifest_digest} is a {mt!r}, not an image manifest: pick one platform's"
            )
        cfg_digest = manifest["config"]["digest"]
        config = json.loads(self.read_blob(cfg_digest))
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        raw_layers = manifest.get("layers") or []
        if diff_ids and len(diff_ids) != len(raw_layers):
            raise ImageError(
                f"image {manifest_digest}: {len(raw_layers)} layers but {len(diff_ids)} diff_ids in its config"
            )
        layers = tuple(
            LayerRecord(digest=lay["digest"], media_type=lay.get("mediaType", ""), size=int(lay.get("size", 0)),
                        diff_id=diff_ids[i] if diff_ids else "")
            for i, lay in enumerate(raw_layers)
        )  # fmt: skip
        for lay in layers:
            if "nondistributable" in lay.media_type or "foreign" in lay.media_type:
                pass  # still a tar; its blob must be here like any other
            if not self.has_blob(lay.digest):
                raise ImageError(
                    f"layer {lay.digest} of image {manifest_digest} is not in the store: pull it again"
                )
        ic = ImageConfig.from_config(config)
        size = len(self.read_blob(manifest_digest)) + self.blob_path(cfg_digest).stat().st_size
        size += sum(self.blob_path(lay.digest).stat().st_size for lay in layers)
        rec = ImageRecord(
            digest=manifest_digest, config_digest=cfg_digest, layers=layers, size_bytes=size,
            env=ic.env, working_dir=ic.working_dir, user=ic.user,
            architecture=str(config.get("architecture", "")), os=str(config.get("os", "")),
            source=source, created=time.time(),
        )  # fmt: skip
        self.rootfs(rec, progress)
        path = self.root / "images" / f"{manifest_digest.split(':', 1)[1]}.json"
        if not path.is_file():
            tmp = self.temp_path("record")
            tmp.write_text(rec.model_dump_json(indent=1))
            os.replace(tmp, path)
        for r in refs:
            self.tag(r, manifest_digest)
        return self.get(manifest_digest) or rec

    def _refs_path(self) -> Path:
        return self.root / "refs.json"

    def refs(self) -> dict[str, str]:
        try:
            data = json.loads(self._refs_path().read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError:
            raise ImageError(
                f"{self._refs_path()} is corrupt: remove it and pull or tag the images again"
            ) from None
        return {str(k): str(v) for k, v in data.items()}

    def _write_refs(self, refs: dict[str, str]) -> None:
        tmp = self.temp_path("refs")
        tmp.write_text(json.dumps(dict(sorted(refs.items())), indent=1) + "\n")
        os.replace(tmp, self._refs_path())

    def tag(self, ref: str, digest: str) -> None:
        """Point ``ref`` (normalised: ``debian`` is ``docker.io/library/debian:latest``) at ``digest``."""
        key = str(parse(ref))
        with locked(self.root / "locks" / "refs.lock"):
            refs = self.refs()
            refs[key] = digest
            self._write_refs(refs)

    def get(self, digest: str) -> ImageRecord | None:
        path = self.root / "images" / f"{digest.split(':', 1)[-1]}.json"
        if not path.is_file():
            return None
        return ImageRecord.model_validate_json(path.read_text())

    def records(self) -> list[ImageRecord]:
        out = []
        for p in sorted((self.root / "images").glob("*.json")):
            with contextlib.suppress(ValueError):
                out.append(ImageRecord.model_validate_json(p.read_text()))
        return out

    def resolve(self, ref: str) -> ImageRecord | None:
        """The stored image ``ref`` names: a digest (or a unique hex prefix of one, 12+ digits), a
        reference pinned by digest, or a tag pulled, imported or built here."""
        text = ref.strip()
        hexpart = text.removeprefix("sha256:")
        if len(hexpart) >= 12 and all(c in "0123456789abcdef" for c in hexpart):
            hits = [r for r in self.records() if r.digest.split(":", 1)[1].startswith(hexpart)]
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise ImageError(f"{ref!r} names {len(hits)} images: give more of the digest")
            return None
        parsed = parse(text)
        digest = self.refs().get(str(parsed)) or parsed.digest
        return self.get(digest) if digest else None

    def require(self, ref: str) -> ImageRecord:
        rec = self.resolve(ref)
        if rec is None:
            raise ImageError(
                f"image {ref!r} is not in the image store {self.root}: "
                f"sparring image pull {ref} (or image import / image build)"
            )
        return rec

    def refs_of(self, digest: str) -> list[str]:
        return sorted(k for k, v in self.refs().items() if v == digest)

    def remove(self, ref: str) -> list[str]:
        """Forget ``ref``; when no reference names its image any more (or ``ref`` is its digest), the
        image's record and root go too. Returns the digests removed (their blobs wait for ``gc``)."""
        rec = self.require(ref)
        with locked(self.root / "locks" / "refs.lock"):
            refs = self.refs()
            text = ref.strip()
            by_digest = rec.digest.split(":", 1)[1].startswith(text.removeprefix("sha256:"))
            if by_digest or parse(text).digest:
                refs = {k: v for k, v in refs.items() if v != rec.digest}
            else:
                refs.pop(str(parse(text)), None)
            self._write_refs(refs)
            if rec.digest in refs.values():
                return []
        (self.root / "images" / f"{rec.digest.split(':', 1)[1]}.json").unlink(missing_ok=True)
        d = self.root_dir(rec.digest)
        with locked(self.root / "locks" / f"root-{d.name}.lock"):
            if d.exists():
                self._remove(d)
        return [rec.digest]

    def gc(self) -> dict[str, int]:
        """Remove blobs, layers and roots no recorded image uses, and tmp/ leftovers of dead processes."""
        keep_blobs: set[str] = set()
        keep_roots: set[str] = set()
        for rec in self.records():
            keep_roots.add(rec.digest.split(":", 1)[1])
            keep_blobs.update(d.split(":", 1)[1] for d in (rec.digest, rec.config_digest))
            keep_blobs.update(lay.digest.split(":", 1)[1] for lay in rec.layers)
        out = {"blobs": 0, "layers": 0, "roots": 0, "tmp": 0, "bytes": 0}
        for p in (self.root / "blobs/sha256").iterdir():
            if p.name not in keep_blobs:
                out["bytes"] += p.stat().st_size
                p.unlink(missing_ok=True)
                out["blobs"] += 1
        for kind, keep in (("layers", keep_blobs), ("roots", keep_roots)):
            for p in (self.root / kind / "sha256").iterdir():
                if p.name in keep:
                    continue
                lock = self.root / "locks" / f"{kind[:-1]}-{p.name}.lock"
                with locked(lock):
                    if p.exists():
                        self._remove(p)
                lock.unlink(missing_ok=True)
                out[kind] += 1
        for p in (self.root / "tmp").iterdir():
            pid = p.name.split("-", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                self._remove(p)
                out["tmp"] += 1
        return out
