"""Hostile images: every trick a layer can play on the host that unpacks it is refused in one line or
contained, and nothing outside the image store is written or read. Each test has a positive control:
the same image without the trick imports, so the refusal is the trick's and not a broken fixture."""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import threading
from pathlib import Path

import pytest
from image_support import entry, tar_bytes, write_layout

from sparring.errors import ImageError
from sparring.images.archive import import_archive
from sparring.images.store import ImageStore
from sparring.images.unpack import Limits

D, L, S = tarfile.DIRTYPE, tarfile.LNKTYPE, tarfile.SYMTYPE


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host directory outside the store that hostile entries aim at."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret").write_text("host secret\n")
    return d


def _snapshot(d: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for p in sorted(d.rglob("*")):
        out[str(p.relative_to(d))] = (
            p.lstat().st_mode,
            p.read_bytes() if p.is_file() and not p.is_symlink() else b"",
        )
    return out


def _import(tmp_path: Path, layers: list[bytes], name: str = "img", limits: Limits | None = None):
    layout = tmp_path / f"layout-{name}"
    write_layout(layout, layers)
    store = ImageStore(tmp_path / "store", limits=limits)
    rec = import_archive(store, layout, tag=f"hostile/{name}:1")
    return store, store.root_dir(rec.digest)


def _refused(tmp_path: Path, layers: list[bytes], match: str, outside: Path) -> str:
    before = _snapshot(outside)
    store = tmp_path / "store"
    listed = {
        d: sorted(os.listdir(store / d)) if (store / d).is_dir() else [] for d in ("roots/sha256", "images")
    }
    with pytest.raises(ImageError, match=match) as ei:
        _import(tmp_path, layers, name="bad")
    assert "\n" not in str(ei.value)
    assert _snapshot(outside) == before
    for d, names in listed.items():
        assert sorted(os.listdir(store / d)) == names, f"no half-made {d} entry of a refused image is visible"
    assert not list((store / "tmp").iterdir()), "the work in progress is cleaned up"
    return str(ei.value)


def test_tar_slip_is_refused(tmp_path, outside):
    _, root = _import(tmp_path, [tar_bytes([entry("x", data=b"in\n")])], "ok")
    assert (root / "x").read_text() == "in\n"  # control
    msg = _refused(
        tmp_path, [tar_bytes([entry(f"../../{outside.name}/x", data=b"out\n")])], "climbs out", outside
    )
    assert "'..'" in msg


def test_absolute_name_is_refused(tmp_path, outside):
    _refused(tmp_path, [tar_bytes([entry(str(outside / "abs"), data=b"out\n")])], "absolute name", outside)


def test_absolute_and_dotdot_symlinks_are_kept_as_links_never_followed(tmp_path, outside):
    layer = tar_bytes([
        entry("evil", S, link=str(outside / "secret")),
        entry("up", S, link="../../../../" + str(outside).lstrip("/")),
        entry("dir/", D),
    ])  # fmt: skip
    before = _snapshot(outside)
    _, root = _import(tmp_path, [layer])
    assert os.readlink(root / "evil") == str(outside / "secret")
    assert os.readlink(root / "up").endswith(str(outside).lstrip("/"))
    assert _snapshot(outside) == before
    # control: followed from the host, these links would reach the secret
    assert (root / "evil").read_text() == "host secret\n"


def test_hardlink_out_of_the_tree_is_refused(tmp_path, outside):
    ok = tar_bytes([entry("a", data=b"A\n"), entry("b", L, link="a")])
    _, root = _import(tmp_path, [ok], "ok")
    assert os.stat(root / "a").st_ino == os.stat(root / "b").st_ino  # control: an in-layer link works
    _refused(tmp_path, [tar_bytes([entry("h", L, link=str(outside / "secret"))])], "absolute name", outside)
    _refused(tmp_path, [tar_bytes([entry("h", L, link="../outside/secret")])], "climbs out", outside)
    _refused(tmp_path, [tar_bytes([entry("h", L, link="etc/shadow")])], "names no file made earlier", outside)


def test_hardlink_through_a_symlink_is_refused(tmp_path, outside):
    layer = tar_bytes([entry("s", S, link=str(outside)), entry("h", L, link="s/secret")])
    _refused(tmp_path, [layer], "names no file made earlier", outside)


def test_write_through_a_symlink_planted_in_an_earlier_entry_is_refused(tmp_path, outside):
    ok = tar_bytes([entry("d/", D), entry("d/f", data=b"x\n")])
    _, root = _import(tmp_path, [ok], "ok")
    assert (root / "d" / "f").is_file()  # control
    bad = tar_bytes([entry("d", S, link=str(outside)), entry("d/pwned", data=b"x\n")])
    assert "not a directory" in _refused(tmp_path, [bad], "goes through 'd'", outside)
    assert not (outside / "pwned").exists()


def test_write_through_a_symlink_planted_in_an_earlier_layer_is_refused(tmp_path, outside):
    first = tar_bytes([entry("d", S, link=str(outside))])
    _refused(
        tmp_path, [first, tar_bytes([entry("d/pwned", data=b"x\n")])], "earlier layer made a symlink", outside
    )
    assert not (outside / "pwned").exists()
    # control: a layer that names the directory itself replaces the link (as overlayfs would), contained
    _, root = _import(tmp_path, [first, tar_bytes([entry("d/", D), entry("d/f", data=b"x\n")])], "ok")
    assert (root / "d").is_dir() and not (root / "d").is_symlink()
    assert (root / "d" / "f").is_file() and not (outside / "f").exists()


def test_setuid_root_binary_loses_its_bits(tmp_path):
    layer = tar_bytes([entry("bin/", D), entry("bin/su", data=b"\x7fELF", mode=0o6755)])
    with tarfile.open(fileobj=__import__("io").BytesIO(layer)) as tf:
        assert tf.getmember("bin/su").mode & 0o6000 == 0o6000  # control: the layer asks for setuid+setgid
    _, root = _import(tmp_path, [layer])
    mode = os.stat(root / "bin" / "su").st_mode
    assert stat.S_IMODE(mode) == 0o755 and not mode & (stat.S_ISUID | stat.S_ISGID)
    assert os.stat(root / "bin" / "su").st_uid == os.geteuid()  # the image's owner (0) is never applied


def test_device_nodes_and_fifos_are_never_made(tmp_path):
    dev = tarfile.TarInfo("dev/kmem")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 2
    fifo = tarfile.TarInfo("fifo")
    fifo.type = tarfile.FIFOTYPE
    layer = tar_bytes([entry("dev/", D), dev, fifo, entry("plain", data=b"p")])
    with tarfile.open(fileobj=__import__("io").BytesIO(layer)) as tf:
        assert tf.getmember("dev/kmem").ischr()  # control: the node is in the layer
    store, root = _import(tmp_path, [layer])
    assert (root / "plain").is_file()
    assert not (root / "dev" / "kmem").exists() and not (root / "fifo").exists()


def test_whiteouts_apply_and_one_that_climbs_out_is_refused(tmp_path, outside):
    base = tar_bytes(
        [entry("keep", data=b"k"), entry("gone", data=b"g"), entry("d/", D), entry("d/old", data=b"o")]
    )
    top = tar_bytes([entry(".wh.gone"), entry("d/", D), entry("d/.wh..wh..opq"), entry("d/new", data=b"n")])
    _, root = _import(tmp_path, [base, top], "ok")
    assert (root / "keep").exists() and not (root / "gone").exists()  # control: whiteouts work
    assert sorted(p.name for p in (root / "d").iterdir()) == ["new"]  # the opaque dir hid d/old
    (outside / "x").write_text("keep me\n")
    _refused(tmp_path, [base, tar_bytes([entry("../.wh.x")])], "climbs out", outside)
    _refused(tmp_path, [base, tar_bytes([entry("d/.wh..")])], "names no entry below", outside)
    assert (outside / "x").read_text() == "keep me\n"


def test_size_and_file_count_bounds(tmp_path):
    few = tar_bytes([entry(f"f{i}", data=b"x" * 10) for i in range(2)])
    _import(tmp_path, [few], "ok", limits=Limits(max_bytes=100, max_files=3))  # control
    many = tar_bytes([entry(f"f{i}", data=b"x") for i in range(5)])
    with pytest.raises(ImageError, match="more than 3 entries"):
        _import(tmp_path, [many], "many", limits=Limits(max_bytes=100, max_files=3))
    big = tar_bytes([entry("big", data=b"x" * 200)])
    with pytest.raises(ImageError, match="more than 100 bytes"):
        _import(tmp_path, [big], "big", limits=Limits(max_bytes=100, max_files=3))


def test_a_blob_that_does_not_match_its_digest_leaves_nothing(tmp_path):
    store = ImageStore(tmp_path / "store")
    good = b"layer bytes"
    wrong = "sha256:" + hashlib.sha256(b"other").hexdigest()
    with pytest.raises(ImageError, match="does not match its digest"):
        store.put_blob_stream(wrong, [good])
    assert not list((store.root / "blobs" / "sha256").iterdir())
    assert not list((store.root / "tmp").iterdir())
    d = store.put_blob_bytes(good)  # control
    assert store.blob_path(d).read_bytes() == good


def test_two_imports_of_the_same_layer_at_once_share_one_unpack(tmp_path):
    shared = tar_bytes([entry(f"f{i}", data=os.urandom(64)) for i in range(200)])
    layouts = []
    for i in range(2):
        layouts.append(tmp_path / f"l{i}")
        write_layout(layouts[-1], [shared, tar_bytes([entry(f"own{i}", data=b"x")])])
    store = ImageStore(tmp_path / "store")
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            import_archive(ImageStore(store.root), layouts[i], tag=f"c/img{i}:1")
        except BaseException as e:  # pragma: no cover - the assertion below reports it
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(list((store.root / "layers" / "sha256").iterdir())) == 3  # the shared layer once
    for i in range(2):
        root = store.root_dir(store.require(f"c/img{i}:1").digest)
        assert len([p for p in root.iterdir() if p.name.startswith("f")]) == 200
        assert (root / f"own{i}").exists()
