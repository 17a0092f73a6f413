"""Podman plumbing for the OCI backend: its flags and the local image (the command line is in ``features``).

No registry is reachable from the machines Sparring runs on, so the default
image is built locally: a root filesystem made of Debian's statically linked
busybox (package ``busybox-static``) and a few directories, imported with
``podman import``. The tag carries a digest of the busybox binary, so a host
with a different busybox gets a different image.

A task's own image (``SandboxSpec.image``) is podman's: :func:`inspect_image` reads its id and config
(``Env``) from podman's storage, the image the container then runs, never from Sparring's image store
(which may not hold it, or hold another image under the same name).
"""

from __future__ import annotations

import hashlib
import io
import json
import resource
import shutil
import struct
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from sparring.errors import SandboxError, SandboxUnavailableError
from sparring.images.runtime import ImageConfig
from sparring.sandbox.isolation.features import INSTALL_HINT, podman_argv

IMAGE_REPO = "localhost/sparring-busybox"


def ulimit_flags() -> list[str]:
    """podman's default rlimits exceed this host's hard limits (runc then fails): stay below them."""
    out: list[str] = []
    for name, res, want in (
        ("nofile", resource.RLIMIT_NOFILE, 4096),
        ("nproc", resource.RLIMIT_NPROC, 32768),
    ):
        hard = resource.getrlimit(res)[1]
        n = want if hard == resource.RLIM_INFINITY else min(want, hard)
        out += ["--ulimit", f"{name}={n}:{n}"]
    return out


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no message)"


def _is_static_elf(path: Path) -> bool:
    """True when ``path`` is an ELF executable without a program interpreter (PT_INTERP)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
            return False
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


def find_static_busybox() -> Path:
    for cand in (shutil.which("busybox"), "/bin/busybox", "/usr/bin/busybox"):
        if cand and Path(cand).is_file() and _is_static_elf(Path(cand)):
            return Path(cand).resolve()
    raise SandboxUnavailableError(f"no statically linked busybox for the default OCI image: {INSTALL_HINT}")


def _rootfs_tar(busybox: Path) -> bytes:
    """A deterministic tarball of the default image's root filesystem."""
    applets = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime, ti.linkname, ti.size = kind, mode, 0, link, len(data)
            tar.addfile(ti, io.BytesIO(data) if data else None)

        dirs = "bin etc tmp root home home/agent workspace proc sys dev usr usr/bin var var/tmp run"
        for d in dirs.split():  # noqa: SIM905
            add(d, tarfile.DIRTYPE, 0o1777 if d in ("tmp", "var/tmp") else 0o755)
        add("bin/busybox", tarfile.REGTYPE, 0o755, busybox.read_bytes())
        for a in sorted(set(applets) - {"busybox"}):
            add(f"bin/{a}", tarfile.SYMTYPE, 0o777, link="busybox")
        add("usr/bin/env", tarfile.SYMTYPE, 0o777, link="/bin/busybox")
        add(
            "etc/passwd",
            tarfile.REGTYPE,
            0o644,
            b"root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n",
        )
        add("etc/group", tarfile.REGTYPE, 0o644, b"root:x:0:\nagent:x:1000:\n")
    return buf.getvalue()


def ensure_image() -> str:
    """Build (once) and return the default image: busybox on an otherwise empty root, no network needed."""
    argv = podman_argv()
    busybox = find_static_busybox()
    digest = hashlib.sha256(busybox.read_bytes()).hexdigest()[:12]
    name = f"{IMAGE_REPO}:{digest}"
    if subprocess.run(argv + ["image", "exists", name], capture_output=True).returncode == 0:
        return name
    data = _rootfs_tar(busybox)
    r = subprocess.run(argv + ["import", "-q", "-", name], input=data, capture_output=True, timeout=300)
    if r.returncode != 0:
        raise SandboxError(f"podman import of {name} failed: {first_line(r.stderr.decode(errors='replace'))}")
    return name


@dataclass(frozen=True)
class ImageFacts:
    """What the OCI backend needs of a task's image: podman's id of it (what the container runs, so a
    tag moved meanwhile changes nothing) and the parts of its config a sandbox applies."""

    id: str
    config: ImageConfig


def inspect_image(podman: list[str], ref: str) -> ImageFacts:
    """``podman image inspect`` of ``ref``; SandboxError in one line when podman does not hold it."""
    r = subprocess.run(podman + ["image", "inspect", "--format", "json", ref], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    if r.returncode != 0:
        msg = first_line(r.stderr)
        if "image not known" in msg or "no such" in msg.lower():
            raise SandboxError(f"container image {ref!r} not found locally: build or load it first")
        raise SandboxError(f"podman could not inspect image {ref!r}: {msg}")
    try:
        found = json.loads(r.stdout)[0]
        cfg = ImageConfig.from_config({"config": found.get("Config") or {}})
        return ImageFacts(id=str(found["Id"]), config=cfg)
    except (ValueError, LookupError, TypeError, AttributeError, AssertionError):
        raise SandboxError(
            f"podman's inspection of image {ref!r} is not what it should be: {r.stdout[:200]!r}"
        ) from None
