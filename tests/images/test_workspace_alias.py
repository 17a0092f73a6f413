"""The workspace at the image's own path too (issue 34): a spec's ``workspace_alias`` (a task's
``[environment] workspace``, /testbed in SWE-bench images) shows the sandbox's one live workspace there as
well, on a tiny busybox image whose /testbed holds a stale copy. Edits through either path are seen
through the other and in the diff; snapshot, restore and reset cover both; prefork and copy mode too.
The controls: the same sandbox without the alias sees the image's stale /testbed, and paths that would
shadow the image, or an image whose /testbed is a link, are refused with one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from image_support import entry, tar_bytes, write_layout
from test_image_sandbox import BUSYBOX, busybox_layers

from sparring.errors import SandboxError
from sparring.images.archive import import_archive
from sparring.images.store import ImageStore
from sparring.sandbox.base import SandboxSpec, check_workspace_alias
from sparring.sandbox.local.backend import LocalBackend
from sparring.tasks.spec import Environment

IMAGE = "sparring-test/busybox-testbed:1"
LINKED = "sparring-test/busybox-testbed-link:1"
STALE = b"stale, from the image\n"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)"),
    pytest.mark.skipif(BUSYBOX is None, reason="busybox-static is installed by `make system`"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ImageStore:
    """Busybox with /testbed/f.txt (the image's stale copy), and one whose /testbed links to /etc."""
    d = tmp_path_factory.mktemp("testbed-image")
    st = ImageStore(d / "store")
    testbed = tar_bytes([entry("testbed/", tarfile.DIRTYPE), entry("testbed/f.txt", data=STALE)])
    write_layout(d / "img", [*busybox_layers(), testbed], env=["PATH=/bin"])
    import_archive(st, d / "img", tag=IMAGE)
    linked = tar_bytes([entry("testbed", tarfile.SYMTYPE, link="/etc")])
    write_layout(d / "link", [*busybox_layers(), linked], env=["PATH=/bin"])
    import_archive(st, d / "link", tag=LINKED)
    return st


def _run(store: ImageStore, tmp: Path, spec: SandboxSpec, script, **kw):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        b = LocalBackend(root=tmp / "sb", image_store=store, **kw)
        try:
            return await script(b, spec)
        finally:
            await b.aclose()

    return asyncio.run(go())


async def _sh(sb, cmd: str, cwd: str = "/workspace") -> str:  # type: ignore[no-untyped-def]
    r = await sb.exec(cmd, cwd=cwd)
    assert r.exit_code == 0, (cmd, r.stderr)
    return str(r.stdout)


async def _cycle(b: LocalBackend, spec: SandboxSpec) -> dict[str, object]:
    """Edits through both paths, the diff, snapshot/restore and reset, seen through both paths."""
    sb = await b.create(spec)
    try:
        out: dict[str, object] = {"pwd": await _sh(sb, "pwd")}
        await _sh(sb, "echo agent > /workspace/f.txt; echo via-alias > /testbed/new.txt")
        out["edited"] = await _sh(sb, "cat /testbed/f.txt /workspace/new.txt", cwd="/tmp")
        out["diff"] = sorted((await sb.diff()).files)
        sid = await sb.snapshot()
        await _sh(sb, "echo later > /testbed/f.txt; rm /workspace/new.txt")
        await sb.restore(sid)
        out["restored"] = await _sh(sb, "cat /testbed/f.txt /testbed/new.txt /workspace/f.txt")
        await sb.reset()
        out["reset"] = await _sh(sb, "cat /testbed/f.txt /workspace/f.txt; ls /testbed; ls /workspace")
        return out
    finally:
        await sb.close()


def test_the_workspace_is_live_at_the_image_path(store, tmp_path, workspace):
    spec = SandboxSpec(image=IMAGE, workspace=workspace, workspace_alias="/testbed")
    out = _run(store, tmp_path, spec, _cycle)
    assert out["pwd"] == "/workspace\n"  # commands still start in /workspace
    assert out["edited"] == "agent\nvia-alias\n"  # each path sees the other's edit
    assert out["diff"] == ["f.txt", "new.txt"]  # one tree: the alias's write is in the agent's diff
    assert out["restored"] == "agent\nvia-alias\nagent\n"
    assert out["reset"] == "orig\norig\nf.txt\nsub\nf.txt\nsub\n"  # the edits gone at both paths


def test_without_the_alias_the_image_path_is_the_stale_copy(store, tmp_path, workspace):
    """The control (the behaviour before issue 34's fix): /testbed is the image's own, untouched."""

    async def script(b: LocalBackend, spec: SandboxSpec) -> str:
        sb = await b.create(spec)
        try:
            return await _sh(sb, "echo agent > /workspace/f.txt; cat /testbed/f.txt")
        finally:
            await sb.close()

    assert _run(store, tmp_path, SandboxSpec(image=IMAGE, workspace=workspace), script) == STALE.decode()


def test_a_prestarted_sandbox_gets_the_alias_too(store, tmp_path, workspace):
    spec = SandboxSpec(image=IMAGE, workspace=workspace, workspace_alias="/testbed")

    async def script(b: LocalBackend, spec: SandboxSpec) -> tuple[int, dict[str, object]]:
        assert b.prefork is not None
        await b.prefork.fill(spec)
        before = b.prefork.hits
        out = await _cycle(b, spec)
        return b.prefork.hits - before, out

    hits, out = _run(store, tmp_path, spec, script, prefork=1)
    assert hits == 1  # the create took the pre-started sandbox
    assert out["edited"] == "agent\nvia-alias\n" and out["reset"] == "orig\norig\nf.txt\nsub\nf.txt\nsub\n"


def test_copy_mode_binds_the_same_directory_twice(store, tmp_path, workspace):
    spec = SandboxSpec(image=IMAGE, workspace=workspace, workspace_alias="/testbed")
    out = _run(store, tmp_path, spec, _cycle, mode="copy")
    assert out["edited"] == "agent\nvia-alias\n"
    assert out["reset"] == "orig\norig\nf.txt\nsub\nf.txt\nsub\n"


def test_the_host_root_gets_the_alias_too(tmp_path, workspace):
    """No image: the mount point is made in the sandbox's own root."""

    async def script(b: LocalBackend, spec: SandboxSpec) -> str:
        sb = await b.create(spec)
        try:
            return await _sh(sb, "echo agent > /workspace/f.txt; cat /srv/repo/f.txt")
        finally:
            await sb.close()

    spec = SandboxSpec(workspace=workspace, workspace_alias="/srv/repo")
    assert _run(ImageStore(tmp_path / "none"), tmp_path, spec, script) == "agent\n"


@pytest.mark.parametrize(
    "path", ["/", "/usr", "/usr/lib/x", "/etc", "/lib64", "/proc", "/dev", "/sys", "/bin", "/sbin", "/tmp",
             "/workspace", "/workspace/x", "/home", "/home/agent", "/.sparring", "/judge/hidden", "/run",
             "relative", "/a/../b", "/a/./b", "//x"],
)  # fmt: skip
def test_paths_that_would_shadow_the_image_are_refused(path):
    with pytest.raises(ValueError, match="workspace path") as e:
        check_workspace_alias(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="workspace path"):
        SandboxSpec(workspace_alias=path)
    with pytest.raises(ValueError, match="workspace path"):
        Environment(image="reg/x@sha256:" + "0" * 64, workspace=path)  # a task's, checked the same way


def test_usable_paths_are_kept():
    assert [check_workspace_alias(p) for p in ("/testbed", "/testbed/", "/app/src", "/home/user/repo")] == [
        "/testbed", "/testbed", "/app/src", "/home/user/repo",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="overlaps the extra mount /testbed/x"):
        SandboxSpec(workspace_alias="/testbed", extra_ro={"/testbed/x": Path("/")})


def test_an_image_without_the_directory_or_with_a_link_there_is_refused(store, tmp_path, workspace):
    """One line, before anything is mounted. The control: the linked image really has /testbed -> /etc
    (mounting through it on the host would have covered the image's /etc, or worse, a host path)."""
    link = store.rootfs(store.require(LINKED)) / "testbed"
    assert link.is_symlink() and os.readlink(link) == "/etc"

    async def script(b: LocalBackend, spec: SandboxSpec) -> None:
        await b.create(spec)

    for image, alias, why in ((IMAGE, "/srv/absent", "No such file"), (LINKED, "/testbed", "symlink")):
        spec = SandboxSpec(image=image, workspace=workspace, workspace_alias=alias)
        with pytest.raises(SandboxError, match=f"has no directory {alias} .*{why}") as e:
            _run(store, tmp_path, spec, script)
        assert "\n" not in str(e.value)
    assert not any((tmp_path / "sb").glob("sandboxes/sb-*"))  # nothing half-made left behind


def test_sandbox_exec_workspace_at(tmp_path, workspace):
    """The CLI: `sandbox exec --workspace-at` (host root here), and a refused path as one line, exit 2 (bad input)."""
    exe = str(Path(sys.executable).parent / "sparring")
    r = subprocess.run([exe, "sandbox", "exec", "--workspace", str(workspace), "--workspace-at", "/srv/repo", "--",
                        "sh", "-c", "echo agent > f.txt; cat /srv/repo/f.txt"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert (r.returncode, r.stdout) == (0, "agent\n"), r.stderr
    r = subprocess.run([exe, "sandbox", "exec", "--workspace", str(workspace), "--workspace-at", "/usr", "--", "true"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "--workspace-at: workspace path '/usr' would shadow /usr" in r.stderr, (
        r.stderr
    )
    assert len(r.stderr.strip().splitlines()) == 1
