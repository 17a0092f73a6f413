"""Building an image from a Dockerfile with buildah (daemonless; its ``RUN`` steps really run).

``buildah bud`` builds into buildah's own storage, ``buildah push`` writes the result as an
oci-archive in the store's tmp/, and archive.py imports it like any other archive, so a built image
has a digest and a root like a pulled one. Without buildah the build is refused in one line.
``$SPARRING_BUILDAH_ISOLATION`` picks buildah's isolation for ``RUN`` (default ``chroot``, which
works inside containers and unprivileged hosts too; ``oci`` uses runc).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sparring.errors import ImageError
from sparring.images.archive import import_archive
from sparring.images.reference import parse
from sparring.images.store import ImageRecord, ImageStore

ISOLATION_ENV = "SPARRING_BUILDAH_ISOLATION"


def buildah() -> str:
    exe = shutil.which("buildah")
    if exe is None:
        raise ImageError("image build needs buildah: install buildah (apt-get install buildah)")
    return exe


def build(
    store: ImageStore, context: Path, tag: str, dockerfile: Path | None = None, quiet: bool = False
) -> ImageRecord:
    """Build ``context`` (with ``dockerfile``, default ``context/Dockerfile``) and import it as ``tag``."""
    parse(tag)
    exe = buildah()
    if not context.is_dir():
        raise ImageError(f"build context {context} is not a directory")
    df = dockerfile or context / "Dockerfile"
    if not df.is_file():
        raise ImageError(f"no Dockerfile at {df}: pass -f DOCKERFILE")
    isolation = os.environ.get(ISOLATION_ENV, "chroot")
    name = str(parse(tag)).removeprefix("docker.io/")
    out = sys.stderr if not quiet else subprocess.DEVNULL
    r = subprocess.run(
        [exe, "bud", "--isolation", isolation, "-f", str(df), "-t", name, str(context)],
        stdout=out, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ImageError(f"buildah bud failed (exit {r.returncode}): {last}")
    archive = store.temp_path("build.tar")
    try:
        r = subprocess.run(
            [exe, "push", name, f"oci-archive:{archive}:{name}"], capture_output=True, text=True
        )
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["no output"])[-1]
            raise ImageError(f"buildah push to an oci-archive failed: {last}")
        return import_archive(store, archive, tag=tag, source=f"build {context.resolve()} ({df.name})")
    finally:
        archive.unlink(missing_ok=True)
