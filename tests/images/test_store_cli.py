"""`sparring image import|list|inspect|rm|gc` on a real store, and what an interrupted pull leaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from image_support import entry, tar_bytes, write_layout

from sparring.images.store import ImageStore

SPARRING = [sys.executable, "-m", "sparring.cli.main"]


def _cli(args: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(root), "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([*SPARRING, *args], capture_output=True, text=True, env=env, timeout=120)


def _layout(d: Path, text: bytes) -> Path:
    layers = [tar_bytes([entry("etc/", tarfile.DIRTYPE), entry("etc/motd", data=text)])]
    write_layout(d, layers, env=["PATH=/bin", "A=1"], workdir="/etc")
    return d


def test_import_list_inspect_rm_gc(tmp_path):
    root = tmp_path / "images"
    r = _cli(
        ["image", "import", str(_layout(tmp_path / "one", b"one\n")), "--tag", "t/one:1", "--json"], root
    )
    assert r.returncode == 0, r.stderr
    one = json.loads(r.stdout)
    assert one["refs"] == ["docker.io/t/one:1"] and one["layers"] == 1
    r = _cli(
        ["image", "import", str(_layout(tmp_path / "two", b"two\n")), "--tag", "t/two:1", "--json"], root
    )
    two = json.loads(r.stdout)
    listed = json.loads(_cli(["image", "list", "--json"], root).stdout)["images"]
    assert sorted(i["digest"] for i in listed) == sorted([one["digest"], two["digest"]])

    info = json.loads(_cli(["image", "inspect", "t/one:1", "--json"], root).stdout)
    assert info["env"] == {"PATH": "/bin", "A": "1"} and info["working_dir"] == "/etc"
    assert (Path(info["rootfs"]) / "etc" / "motd").read_text() == "one\n"
    assert (
        json.loads(_cli(["image", "inspect", one["digest"][7:19], "--json"], root).stdout)["digest"]
        == one["digest"]
    )

    r = _cli(["image", "rm", "t/one:1", "--json"], root)
    assert json.loads(r.stdout) == {"removed": [one["digest"]]}
    assert not Path(info["rootfs"]).exists()
    r = _cli(["image", "inspect", "t/one:1"], root)
    assert r.returncode != 0 and "image pull" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    gc = json.loads(_cli(["image", "gc", "--json"], root).stdout)
    assert gc["blobs"] == 3 and gc["layers"] == 1  # manifest, config, layer of the removed image
    store = ImageStore(root)
    assert store.require("t/two:1").digest == two["digest"]  # the other image is untouched
    assert (store.root_dir(two["digest"]) / "etc" / "motd").read_text() == "two\n"


def test_bad_archive_and_bad_tag_are_one_line_errors(tmp_path):
    root = tmp_path / "images"
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar at all" * 100)
    r = _cli(["image", "import", str(junk)], root)
    assert r.returncode != 0 and "not a tar archive" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _cli(["image", "import", str(_layout(tmp_path / "l", b"x")), "--tag", "Bad Tag"], root)
    assert r.returncode != 0 and "has spaces" in r.stderr


def test_an_interrupted_pull_leaves_nothing_visible_and_gc_clears_it(tmp_path):
    """A pull killed mid-blob: its temp file is in tmp/ (named by its pid), nothing in blobs/, no record;
    gc removes the leftover once the puller is dead."""
    root = tmp_path / "images"
    store = ImageStore(root)
    code = (
        "import sys, os, signal\n"
        "from sparring.images.store import ImageStore\n"
        "s = ImageStore()\n"
        "def chunks():\n"
        "    yield b'x' * 4096\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "s.put_blob_stream('sha256:' + '0' * 64, chunks())\n"
    )
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(root), "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert r.returncode == -9  # control: it really died mid-write
    assert len(list((root / "tmp").iterdir())) == 1
    assert not list((root / "blobs" / "sha256").iterdir()) and store.records() == []
    assert store.gc()["tmp"] == 1
    assert not list((root / "tmp").iterdir())


def test_docker_save_and_oci_archive_imports(tmp_path):
    """skopeo writes the same image as a docker save tar and as an oci-archive; both import, both give
    the same root, and the archive's own name tags the image."""
    import shutil

    skopeo = shutil.which("skopeo")
    assert skopeo is not None, "skopeo is missing: run `make system`"
    layout = _layout(tmp_path / "l", b"archived\n")
    docker, oci = tmp_path / "d.tar", tmp_path / "o.tar"
    for dest in (f"docker-archive:{docker}:t/dock:1", f"oci-archive:{oci}:t/ocia:1"):
        subprocess.run([skopeo, "copy", "--quiet", f"oci:{layout}", dest], check=True, timeout=120)
    store = ImageStore(tmp_path / "images")
    from sparring.images.archive import import_archive

    d = import_archive(store, docker)
    o = import_archive(store, oci, tag="t/ocia:2")
    assert store.refs_of(d.digest) == ["docker.io/t/dock:1"] and "docker.io/t/ocia:2" in store.refs_of(
        o.digest
    )
    for rec in (d, o):
        assert (store.root_dir(rec.digest) / "etc" / "motd").read_text() == "archived\n"
        assert rec.env == {"PATH": "/bin", "A": "1"} and rec.working_dir == "/etc"
