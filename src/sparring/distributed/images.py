"""Images travel to nodes by digest, once per node: the same digest is the same environment everywhere.

A task may name an OCI image as its environment. The driver resolves the task's reference to a
manifest digest in *its* image store (a tag is never resolved again on a node: a tag that moves
between two nodes' pulls would give them different environments) and sends the node an
:class:`ImageWire`: the reference, the digest, and where the node can get the image.

- **From its registry** first, when the image came from one (the driver's record was pulled, its
  ``source`` is ``registry/name[:tag]@sha256:...``, or the driver holds no record but the reference is
  pinned by digest): the node pulls ``registry/name@digest`` itself (:func:`sparring.images.registry.pull`
  refuses any other manifest). Registry first because the nodes then fetch in parallel from a server
  made for it, and the driver's machine neither reads nor sends layers nor keeps them in Ray's object
  store.
- **From the driver** when the image exists only in the driver's store (imported or built there), or
  when a node's pull failed (a registry on the driver's loopback, a login only the driver has) and the
  driver holds the image: its blobs (manifest, config, layers; content-addressed) go into Ray's object
  store once per run, in pieces of ``blob_chunk_bytes`` (neither the driver nor a node ever holds a
  whole layer), each node fetches only the blobs it lacks and verifies each against its digest as
  it stores it, and records the image (``store.add_image``). A node whose pull failed answers
  :data:`NEED_BLOBS` instead of a trajectory; the driver then ships and sends the episode again.

A node does this on first use, under one lock per digest (concurrent episodes of a new image wait for
the one fetch), and checks that the record it ends up with has exactly the driver's digest. A node that
can get the image from neither place plays no episode of it: each ends ``infra_error`` with a one-line
reason (:class:`ImageUnavailable`), and the node actor lives on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sparring.errors import ConfigError, ImageError, one_line
from sparring.images.reference import is_loopback_host, parse
from sparring.images.store import ImageRecord, ImageStore


@dataclass(frozen=True)
class ImageWire:
    """What a node needs to hold a task's image: small, sent with every episode of an image task."""

    ref: str
    """The task's reference, as its task.toml names it (what its sandboxes' spec says)."""
    digest: str
    """The manifest digest the driver resolved ``ref`` to: the only image the node may run."""
    pull: str | None = None
    """``registry/name@digest`` to pull from, when the image came from a registry."""
    blobs: tuple[str, ...] = ()
    """The blobs the driver can ship (manifest, config, layers): every image it holds. Shipped at once
    when there is no registry to name, else only once a node says its pull failed."""
    source: str = ""
    """Where the driver's copy came from (an archive, a build context): for the node's record."""


class ImageUnavailable(ImageError):
    """The node could get a task's image from neither its registry nor the driver (or got another)."""


class BlobsWanted(ImageError):
    """The image's registry failed on this node and the driver, which holds the image, has not shipped
    its blobs yet: the node answers :data:`NEED_BLOBS` and the driver sends the episode again with them."""


NEED_BLOBS = "sparring:need-image-blobs"
"""A node's answer to an episode whose image it needs the driver's blobs for (not a trajectory)."""


def registry_source(rec: ImageRecord) -> str | None:
    """The pinned reference ``rec`` was pulled by (its ``source``), or None when it was imported or
    built here (an archive's path or a build's context: nothing a node could pull)."""
    try:
        ref = parse(rec.source)
    except ConfigError:
        return None
    return str(ref) if ref.digest else None


def resolve_image(store: ImageStore, ref: str) -> ImageWire:
    """The driver's side: ``ref`` resolved in ``store`` to a digest, and where nodes get that image.

    A reference pinned by digest that the driver does not hold is still sent (the nodes pull it from
    its registry); a tag must be in the driver's store, which fixes the digest every node runs."""
    rec = store.resolve(ref)
    if rec is None:
        parsed = parse(ref)
        if parsed.digest is None:
            raise ImageUnavailable(
                f"image {ref!r} is a tag the driver's image store {store.root} does not hold, so no digest "
                f"can be sent to the nodes: sparring image pull {ref} on the driver (or pin the task by digest)"
            )
        return ImageWire(ref=ref, digest=parsed.digest, pull=str(parsed), source=str(parsed))
    blobs = tuple(dict.fromkeys((rec.digest, rec.config_digest, *(lay.digest for lay in rec.layers))))
    src = registry_source(rec)
    pinned = str(parse(src).with_digest(rec.digest)) if src is not None else None
    return ImageWire(ref=ref, digest=rec.digest, pull=pinned, blobs=blobs, source=src or rec.source)


class NodeImages:
    """A node's image store, filled on first use by digest (one fetch per digest, however many episodes
    of the image start at once). ``pulled`` and ``received`` count images fetched, ``received_pieces`` the
    pieces of blobs the driver shipped: for tests and stats."""

    def __init__(self, store: ImageStore) -> None:
        self.store = store
        self._locks: dict[str, asyncio.Lock] = {}
        self._pull_failed: dict[str, str] = {}
        self.pulled = 0
        self.received = 0
        self.received_pieces = 0

    async def ensure(self, wire: ImageWire, blob_refs: dict[str, Any] | None) -> ImageRecord:
        """The image ``wire`` names, in this node's store. ``blob_refs`` maps each shipped blob's digest
        to its pieces in order, each awaitable for its bytes (Ray object refs), or None when nothing is
        shipped.
        Raises :class:`ImageUnavailable` (one line) when the image cannot be had or is not the digest,
        :class:`BlobsWanted` when its registry failed and the driver could ship it but has not."""
        rec = self._held(wire)
        if rec is not None:
            return rec
        lock = self._locks.setdefault(wire.digest, asyncio.Lock())
        async with lock:
            rec = self._held(wire)
            if rec is None:
                rec = await self._fetch(wire, blob_refs)
        return rec

    def _held(self, wire: ImageWire) -> ImageRecord | None:
        """The image, if this node holds it: by the driver's digest, or (a multi-platform index's
        digest) as the manifest this node's platform got when it pulled that pinned reference."""
        rec = self.store.get(wire.digest)
        if rec is None and wire.pull is not None:
            rec = self.store.resolve(wire.pull)
        return rec

    async def _fetch(self, wire: ImageWire, blob_refs: dict[str, Any] | None) -> ImageRecord:
        from sparring.images.registry import pull

        what = f"image {wire.ref} ({wire.digest[:19]})"
        failed = self._pull_failed.get(wire.digest)
        if wire.pull is not None and failed is None:
            ref = parse(wire.pull)
            try:
                got = await asyncio.to_thread(pull, self.store, wire.pull, is_loopback_host(ref.registry))
            except (ImageError, ConfigError) as e:
                failed = self._pull_failed[wire.digest] = f"this node cannot pull {wire.pull}: {one_line(e)}"
            else:
                self.pulled += 1
                if got.index_digest == wire.digest:  # an index: this platform's manifest, the registry's
                    return got.record  # choice under exactly the driver's digest (pull checked it)
                return self._verified(wire, got.record, f"pulled from {ref.registry}")
        if wire.blobs and blob_refs is None:  # the driver holds it: ask for its blobs (registry first)
            raise BlobsWanted(f"{what}: {failed}")
        if not wire.blobs:
            raise ImageUnavailable(
                f"{what}: {failed}; make the registry reachable from every node (and its login, if any), "
                "or pull or import the image on the driver, which then ships it"
                if failed
                else f"{what} is not in this node's store and the driver sent no way to get it: "
                "pull or import it on the driver"
            )
        assert blob_refs is not None
        try:
            for d in wire.blobs:
                if not self.store.has_blob(d):
                    await self._receive(d, blob_refs[d])
            rec = await asyncio.to_thread(
                self.store.add_image, wire.digest, f"from the driver ({wire.source})"
            )
        except (ImageError, KeyError) as e:
            raise ImageUnavailable(
                f"{what}: the blobs the driver shipped were refused: {one_line(e)}"
            ) from None
        self.received += 1
        return self._verified(wire, rec, "received from the driver")

    async def _receive(self, digest: str, pieces: Sequence[Any]) -> None:
        """Blob ``digest`` from the driver's pieces (each awaitable: a Ray object reference), fetched one
        at a time and written in order to a temp file, verified against the digest, then renamed into
        the store: the node holds one piece at a time, however big the layer."""
        loop = asyncio.get_running_loop()

        async def get(ref: Any) -> bytes:
            return bytes(await ref)

        def in_order() -> Iterator[bytes]:
            for ref in pieces:
                self.received_pieces += 1
                yield asyncio.run_coroutine_threadsafe(get(ref), loop).result()

        await asyncio.to_thread(self.store.put_blob_stream, digest, in_order())

    def _verified(self, wire: ImageWire, rec: ImageRecord, how: str) -> ImageRecord:
        if rec.digest != wire.digest:
            raise ImageUnavailable(
                f"image {wire.ref}: {how}, it is {rec.digest}, not the driver's {wire.digest}: refused "
                "(the same digest must be the same environment on every node)"
            )
        return rec
