"""Building an image from a Dockerfile with buildah (daemonless; its ``RUN`` steps really run).

``buildah bud`` builds into buildah's own storage, ``buildah push`` writes the result as an
oci-archive in the store's tmp/, and archive.py imports it like any other archive, so a built image
has a digest and a root like a pulled one. Without buildah the build is refused in one line.
``$SPARRING_BUILDAH_ISOLATION`` picks buildah's isolation for ``RUN`` (default ``chroot``, which
works inside containers and unprivileged hosts too; ``oci`` uses runc).

``RUN`` steps use the host's network (``--network host``: ``apt-get`` and ``pip`` reach their mirrors
the way the host does, through the host's resolver; buildah passes the host's ``*_proxy`` variables
on). A ``FROM`` on a loopback registry (``127.0.0.1:5000/...``, ``localhost:5000/...``) is pulled over
plain HTTP, as docker does for loopback registries; every other base needs TLS.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sparring.errors import ImageError
from sparring.images.archive import import_archive
from sparring.images.reference import is_loopback_host, parse
from sparring.images.store import ImageRecord, ImageStore

ISOLATION_ENV = "SPARRING_BUILDAH_ISOLATION"


def buildah() -> str:
    exe = shutil.which("buildah")
    if exe is None:
        raise ImageError("image build needs buildah: install buildah (apt-get install buildah)")
    return exe


def from_bases(dockerfile: str) -> list[str]:
    """The images a Dockerfile's ``FROM`` lines pull (``--platform``, ``scratch`` and earlier stages
    named by ``AS`` left out)."""
    bases: list[str] = []
    stages: set[str] = set()
    for line in dockerfile.splitlines():
        words = [w for w in line.split() if not w.startswith("--")]
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        if words[1] != "scratch" and words[1].lower() not in stages:
            bases.append(words[1])
        if len(words) >= 4 and words[2].upper() == "AS":
            stages.add(words[3].lower())
    return bases


def loopback_only(bases: list[str]) -> bool:
    """Whether every base comes from a loopback registry (a first component without ``.`` or ``:``
    that is not ``localhost`` is a Docker Hub name)."""
    hosts = []
    for b in bases:
        first, _, rest = b.partition("/")
        if not rest or not (first == "localhost" or "." in first or ":" in first):
            return False
        hosts.append(first)
    return bool(hosts) and all(is_loopback_host(h) for h in hosts)


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
    out = sys.stderr if not quiet else subprocess.PIPE
    tls = ["--tls-verify=false"] if loopback_only(from_bases(df.read_text(errors="replace"))) else []
    r = subprocess.run(
        [exe, "bud", "--isolation", isolation, "--network", "host", *tls, "-f", str(df), "-t", name, str(context)],
        stdout=out, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        said = (r.stdout or "").strip().splitlines()[-1:]  # quiet: the failing step's last line
        why = f" (the step's output ends: {said[0][:200]})" if said else ""
        raise ImageError(f"buildah bud failed (exit {r.returncode}): {last}{why}")
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
        # The image now lives in the store: buildah's copy would only grow /var/lib/containers with every
        # build (the base images it pulled stay there, as its cache).
        subprocess.run([exe, "rmi", "-f", name], capture_output=True, check=False)
