"""Real images for the image tests: OCI layouts written from tars, a Debian image built with mmdebstrap
(cached by recipe), and a real registry (Debian's docker-registry) on loopback, fed with skopeo."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparring.filelock import beside, locked
from sparring.sandbox.isolation.features import podman_argv
from tests_support import wait_until

# What the Debian test image is made from; the cache key, so a change rebuilds it.
DEBIAN_SUITE = "trixie"  # the host runs bookworm: the image's /etc/os-release and python3 differ
DEBIAN_RECIPE = {
    "suite": DEBIAN_SUITE,
    "variant": "essential",
    "include": ["python3-minimal", "python3-pytest"],  # pytest: the judge runs in it (test_judge_in_image)
    "mirror": "http://deb.debian.org/debian",
}
APT_RECIPE = {**DEBIAN_RECIPE, "variant": "minbase", "include": ["python3", "python3-pip", "git"]}
"""A bigger Debian image with apt, pip and git (~300 MB; the same recipe as benchmarks/image_bench.py --big, so
one cache): the base of a Dockerfile whose RUN steps install packages (test_import_harbor_apt_pip)."""
IMAGE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "IMAGE_MARK=from-the-image"]


def cache_dir() -> Path:
    d = Path(os.environ.get("SPARRING_TEST_IMAGE_CACHE", Path.home() / ".cache" / "sparring-test-images"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_bytes(entries: list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """An uncompressed tar of hand-made entries (a file entry is (info, data))."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            if isinstance(e, tuple):
                info, data = e
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(e)
    return buf.getvalue()


def entry(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", mode: int = 0o644, link: str = ""
) -> tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.mtime = kind, mode, link, 1_700_000_000
    if kind == tarfile.REGTYPE:
        return info, data
    if kind == tarfile.DIRTYPE:
        info.mode = mode if mode != 0o644 else 0o755
    return info


def write_layout(
    dest: Path, layers: list[bytes], env: list[str] | None = None, workdir: str = "", ref_name: str = "",
    arch: str = "amd64",
) -> str:  # fmt: skip
    """An OCI image layout at ``dest`` with ``layers`` (uncompressed tars, gzipped here); its manifest digest."""
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        d = _digest(data)
        (blobs / d.split(":")[1]).write_bytes(data)
        return d

    descs, diff_ids = [], []
    for raw in layers:
        gz = gzip.compress(raw, compresslevel=1, mtime=0)
        descs.append(
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(gz), "size": len(gz)}
        )
        diff_ids.append(_digest(raw))
    config = {
        "architecture": arch, "os": "linux",
        "config": {"Env": env or IMAGE_ENV, "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }  # fmt: skip
    cfg = json.dumps(config).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(cfg), "size": len(cfg)},
        "layers": descs,
    }  # fmt: skip
    mbytes = json.dumps(manifest).encode()
    md = put(mbytes)
    desc: dict[str, object] = {"mediaType": manifest["mediaType"], "digest": md, "size": len(mbytes)}
    if ref_name:
        desc["annotations"] = {"org.opencontainers.image.ref.name": ref_name}
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    (dest / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return md


def debian_rootfs_tar(recipe: dict | None = None) -> Path:
    """A Debian rootfs tar made by mmdebstrap from ``recipe`` (default DEBIAN_RECIPE), cached under its hash."""
    recipe = recipe or DEBIAN_RECIPE
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    out = cache_dir() / f"debian-{recipe['suite']}-{key}.tar"
    if out.is_file():
        return out
    with locked(beside(out)):
        if not out.is_file():
            _mmdebstrap(recipe, out)
    return out


def _mmdebstrap(recipe: dict, out: Path) -> None:
    mm = shutil.which("mmdebstrap")
    if mm is None:
        pytest.fail("mmdebstrap is missing: run `make system` (apt-get install mmdebstrap)")
    tmp = out.with_suffix(f".{os.getpid()}.tmp.tar")
    r = subprocess.run(
        [mm, f"--variant={recipe['variant']}", f"--include={','.join(recipe['include'])}",
         "--mode=root" if os.geteuid() == 0 else "--mode=unshare", recipe["suite"], str(tmp), recipe["mirror"]],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        pytest.fail(f"mmdebstrap failed: {r.stderr.strip().splitlines()[-1:]}")
    os.replace(tmp, out)


def debian_layout(recipe: dict | None = None) -> Path:
    """The Debian rootfs as an OCI layout (two layers: the rootfs, then a marker file), cached."""
    tar = debian_rootfs_tar(recipe)
    out = cache_dir() / (tar.stem + "-oci")
    if (out / "index.json").is_file():
        return out
    with locked(beside(out)):
        if not (out / "index.json").is_file():
            _write_debian_layout(tar, out, recipe)
    return out


def _write_debian_layout(tar: Path, out: Path, recipe: dict | None) -> None:
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    marker = tar_bytes(
        [entry("opt/", tarfile.DIRTYPE), entry("opt/image-marker", data=b"made by the image tests\n")]
    )
    write_layout(
        tmp,
        [tar.read_bytes(), marker],
        workdir="/opt",
        ref_name="sparring-test/debian:" + (recipe or DEBIAN_RECIPE)["suite"],
    )
    os.replace(tmp, out)


def layered_layout(base: Path, layer: bytes, dest: Path) -> Path:
    """An OCI layout at ``dest``: the image of layout ``base`` with one more layer (an uncompressed
    tar). The base's blobs are hard-linked, not recompressed: a few ms instead of seconds."""
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for b in (base / "blobs" / "sha256").iterdir():
        try:
            os.link(b, blobs / b.name)
        except OSError:
            shutil.copyfile(b, blobs / b.name)

    def put(data: bytes) -> dict[str, object]:
        d = hashlib.sha256(data).hexdigest()
        (blobs / d).write_bytes(data)
        return {"digest": f"sha256:{d}", "size": len(data)}

    def get(desc: dict[str, str]) -> dict:
        return json.loads((blobs / desc["digest"].split(":")[1]).read_bytes())

    (top,) = json.loads((base / "index.json").read_text())["manifests"]
    manifest = get(top)
    config = get(manifest["config"])
    config["rootfs"]["diff_ids"].append("sha256:" + hashlib.sha256(layer).hexdigest())
    gz = gzip.compress(layer, mtime=0)
    manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **put(gz)})
    manifest["config"] = {**manifest["config"], **put(json.dumps(config).encode())}
    desc = {"mediaType": manifest["mediaType"], **put(json.dumps(manifest).encode())}
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    (dest / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return dest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        return True
    return False


def _up(proc: subprocess.Popen, port: int) -> bool:
    """Whether ``proc`` answers on ``port`` before it exits (waits up to HANG_S: a loaded host starts it slowly)."""
    return (
        bool(wait_until(lambda: proc.poll() is not None or _answers(port), interval_s=0.05))
        and proc.poll() is None
    )


@contextlib.contextmanager
def registry(workdir: Path) -> Iterator[str]:
    """Debian's docker-registry on a free loopback port with a temporary config; yields host:port.

    The port is free when chosen, not when the registry binds it: an outgoing connection of anything else
    may take it in between (its local port comes from the same range). A registry that exits before it
    answers is tried again on another port."""
    exe = shutil.which("docker-registry")
    if exe is None:
        pytest.fail("docker-registry is missing: run `make system` (apt-get install docker-registry)")
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    cfg = workdir / "config.yml"
    log = open(workdir / "registry.log", "wb")  # noqa: SIM115
    proc: subprocess.Popen | None = None
    try:
        for _attempt in range(5):
            port = _free_port()
            cfg.write_text(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                f"    rootdirectory: {workdir / 'data'}\n  delete:\n    enabled: true\n"
                f"http:\n  addr: 127.0.0.1:{port}\n"
            )
            proc = subprocess.Popen([exe, "serve", str(cfg)], stdout=log, stderr=log)
            if _up(proc, port):
                break
            proc.kill()
            proc.wait()
        if proc is None or proc.poll() is not None or not _answers(port):
            pytest.fail(f"docker-registry did not start: {(workdir / 'registry.log').read_text()[-500:]}")
        yield f"127.0.0.1:{port}"
    finally:
        if proc is not None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.close()


def index_layout(dest: Path, images: dict[str, list[bytes]]) -> tuple[str, dict[str, str]]:
    """A multi-platform OCI layout at ``dest``: one image per architecture (``{"amd64": layers, ...}``)
    under one image index. (The index's digest, {architecture: its manifest's digest}); push it with
    ``push(..., all_platforms=True)``."""
    per_arch = {arch: write_layout(dest, layers, arch=arch) for arch, layers in images.items()}
    blobs = dest / "blobs" / "sha256"
    manifests = []
    for arch, md in per_arch.items():
        size = (blobs / md.split(":", 1)[1]).stat().st_size
        manifests.append({
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": size,
            "platform": {"architecture": arch, "os": "linux"},
        })  # fmt: skip
    index = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests}
    ).encode()
    idx = _digest(index)
    (blobs / idx.split(":", 1)[1]).write_bytes(index)
    top = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": idx, "size": len(index)}
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    return idx, per_arch


def push(layout: Path, dest: str, all_platforms: bool = False) -> None:
    """skopeo copy of an OCI layout to ``docker://dest`` (plain HTTP: a loopback registry); with
    ``all_platforms``, a multi-platform layout's index and every image under it."""
    exe = shutil.which("skopeo")
    if exe is None:
        pytest.fail("skopeo is missing: run `make system` (apt-get install skopeo)")
    more = ["--all"] if all_platforms else []
    r = subprocess.run(
        [exe, "copy", "--quiet", *more, "--dest-tls-verify=false", f"oci:{layout}", f"docker://{dest}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if r.returncode != 0:
        pytest.fail(f"skopeo copy failed: {r.stderr.strip()[-400:]}")


def podman_image(layout: Path, name: str) -> Iterator[str]:
    """The image of OCI layout ``layout`` in podman's storage as ``name`` (skopeo keeps its manifest
    digest, so a reference pinned in Sparring's store names it there too); untagged afterwards."""
    r = subprocess.run(["skopeo", "copy", "--quiet", f"oci:{layout}", f"containers-storage:{name}"],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-1000:]
    try:
        yield name
    finally:  # no -f: another name of the same image (another test's) keeps it
        subprocess.run([*podman_argv(), "rmi", name], capture_output=True, timeout=120)
