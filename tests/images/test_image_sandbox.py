"""The local backend on an image's root: a tiny busybox image (the host's static busybox in one layer)
gives a sandbox whose / is the image's, with the usual isolation, reset, snapshot and prefork."""

from __future__ import annotations

import asyncio
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from image_support import entry, tar_bytes, write_layout

from sparring.errors import SandboxError
from sparring.images.archive import import_archive
from sparring.images.store import ImageStore
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.local.backend import LocalBackend

BUSYBOX = shutil.which("busybox")
APPLETS = ("sh", "cat", "ls", "echo", "id", "true", "touch", "rm", "sleep", "env", "pwd", "stat", "mkdir")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)"),
    pytest.mark.skipif(
        BUSYBOX is None, reason="busybox-static is installed by `make system` (podman's image)"
    ),
]


def busybox_layers() -> list[bytes]:
    assert BUSYBOX is not None
    data = Path(BUSYBOX).read_bytes()
    base = [entry("bin/", tarfile.DIRTYPE), entry("bin/busybox", data=data, mode=0o755)]
    base += [entry(f"bin/{a}", tarfile.SYMTYPE, link="busybox") for a in APPLETS]
    base += [
        entry("etc/", tarfile.DIRTYPE),
        entry("etc/os-release", data=b'ID=sparring-busybox\nNAME="busybox image"\n'),
    ]
    base += [entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\n"), entry("srv/", tarfile.DIRTYPE)]
    top = [
        entry("srv/app.txt", data=b"from layer two\n"),
        entry("etc/tmp-link", tarfile.SYMTYPE, link="/etc/shadow"),
    ]
    return [tar_bytes(base), tar_bytes(top)]


@pytest.fixture(scope="module")
def image_env(tmp_path_factory) -> tuple[ImageStore, str, Path]:
    d = tmp_path_factory.mktemp("busybox-image")
    write_layout(d / "layout", busybox_layers(), env=["PATH=/bin", "IMAGE_MARK=busybox"], workdir="/srv")
    store = ImageStore(d / "store")
    rec = import_archive(store, d / "layout", tag="sparring-test/busybox:1")
    return store, rec.digest, d


def _backend(store: ImageStore, tmp: Path, prefork: int = 0) -> LocalBackend:
    return LocalBackend(root=tmp / "sb", image_store=store, prefork=prefork)


def test_the_sandbox_sees_the_image_root_not_the_host(image_env, tmp_path, workspace):
    store, digest, _ = image_env

    async def go() -> list:
        b = _backend(store, tmp_path)
        sb = await b.create(SandboxSpec(image="sparring-test/busybox:1", workspace=workspace))
        try:
            out = [await sb.exec(c) for c in (
                "cat /etc/os-release", "ls /usr 2>&1; echo $?", "id -u; echo $IMAGE_MARK; echo $PATH; echo $HOME",
                "cat /srv/app.txt; cat /workspace/f.txt", "touch /etc/x 2>&1; echo $?",
                "cat /etc/tmp-link 2>&1; echo $?",
            )]  # fmt: skip
            return [r.stdout for r in out] + [sb.image.working_dir if sb.image else ""]
        finally:
            await sb.close()
            await b.aclose()

    osr, usr, ident, files, ro, link, wd = asyncio.run(go())
    assert "sparring-busybox" in osr and "debian" not in osr.lower()  # the host is Debian
    assert usr.strip().endswith("1")  # no /usr in this image: the host's is not there
    assert ident.split() == ["1000", "busybox", "/bin:/.sparring/bin", "/home/agent"]
    assert files == "from layer two\norig\n"
    assert "Read-only" in ro and ro.strip().endswith("1")
    assert link.strip().endswith(
        "1"
    )  # the image's link to /etc/shadow finds nothing: the host's is not there
    assert wd == "/srv"


def test_reset_snapshot_restore_and_prefork_on_an_image(image_env, tmp_path, workspace):
    store, _, _ = image_env
    spec = SandboxSpec(image=store.require("sparring-test/busybox:1").digest, workspace=workspace)

    async def go() -> tuple[str, str, str, int]:
        b = _backend(store, tmp_path, prefork=1)
        try:
            await b.prefork.fill(spec)  # type: ignore[union-attr]
            sb = await b.create(spec)
            hits = b.prefork.hits  # type: ignore[union-attr]
            await sb.exec("echo one > /workspace/a; echo t > /tmp/t")
            sid = await sb.snapshot()
            await sb.exec("echo two > /workspace/a")
            await sb.restore(sid)
            after_restore = (await sb.exec("cat /workspace/a")).stdout
            await sb.reset()
            after_reset = (await sb.exec("ls /workspace /tmp")).stdout
            await sb.close()
            sb = await b.create(spec)
            cli = (await sb.exec("cat /etc/os-release")).stdout
            await sb.close()
            return after_restore, after_reset, cli, hits
        finally:
            await b.aclose()

    after_restore, after_reset, osr, hits = asyncio.run(go())
    assert after_restore == "one\n"
    assert "a" not in after_reset.split() and "t" not in after_reset.split() and "f.txt" in after_reset
    assert "sparring-busybox" in osr
    assert hits == 1  # the pre-started sandbox of this image's shape served the create


def test_an_image_missing_from_the_store_is_one_line(image_env, tmp_path):
    store, _, _ = image_env

    async def go() -> None:
        await _backend(store, tmp_path).create(SandboxSpec(image="sparring-test/absent:1"))

    with pytest.raises(SandboxError, match="sparring image pull") as e:
        asyncio.run(go())
    assert "\n" not in str(e.value)


def test_setuid_in_an_image_gives_no_privilege(image_env, tmp_path):
    """A setuid-root copy of busybox in an image: its bits are gone on disk and, even with them, the
    sandbox (nosuid root, no_new_privs) would not run it as root; the control is the layer's request."""
    assert BUSYBOX is not None
    layer = tar_bytes([entry("bin/", tarfile.DIRTYPE), entry("bin/busybox", data=Path(BUSYBOX).read_bytes(), mode=0o4755),
                       entry("bin/sh", tarfile.SYMTYPE, link="busybox"), entry("bin/id", tarfile.SYMTYPE, link="busybox")])  # fmt: skip
    store, _, d = image_env
    write_layout(d / "suid", [layer], env=["PATH=/bin"])
    rec = import_archive(store, d / "suid", tag="sparring-test/suid:1")
    assert not os.stat(store.root_dir(rec.digest) / "bin" / "busybox").st_mode & 0o6000

    async def go() -> str:
        b = _backend(store, tmp_path)
        sb = await b.create(SandboxSpec(image="sparring-test/suid:1"))
        try:
            return (await sb.exec("id -u; id -ru")).stdout
        finally:
            await sb.close()

    assert asyncio.run(go()).split() == ["1000", "1000"]


def test_copy_mode_runs_the_image_root_too(image_env, tmp_path):
    """Copy mode (the non-root fallback: bubblewrap binds the root itself): the same image root."""
    store, _, _ = image_env

    async def go() -> tuple[str, str]:
        b = LocalBackend(root=tmp_path / "sbc", image_store=store, mode="copy")
        sb = await b.create(SandboxSpec(image="sparring-test/busybox:1"))
        try:
            first = (
                await sb.exec("cat /etc/os-release; echo x > /workspace/a; touch /etc/z 2>&1; echo $?")
            ).stdout
            await sb.reset()
            return first, (await sb.exec("ls /workspace")).stdout
        finally:
            await sb.close()

    first, after = asyncio.run(go())
    assert "sparring-busybox" in first and first.strip().endswith("1")
    assert after == ""
