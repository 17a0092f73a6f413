"""Ray nodes get a task's image by digest on first use (issue 34), on real parts: a local Ray cluster (one
sandbox node whose image store starts empty and is not the driver's), Debian's docker-registry on
loopback fed by skopeo, the Debian trixie test image (Python 3.13 and pytest: the judge runs in it), the
oracle policy and the real judge.

- An image the driver pulled from a registry (by tag: the driver resolves it) is pulled by the node by
  digest, once however many episodes start at once, and not again in a second rollout.
- An image that exists only in the driver's store (imported: no registry) is shipped from the driver.
- An image the node can neither pull nor receive ends each episode ``infra_error`` with one line naming
  it, and the node lives on; a pulled or shipped image that is not the driver's digest is refused.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import ray
import tomli_w
from image_support import (
    DEBIAN_SUITE,
    debian_layout,
    entry,
    index_layout,
    layered_layout,
    push,
    registry,
    tar_bytes,
    write_layout,
)
from ray.cluster_utils import Cluster

from sparring.distributed import RayOptions, make_executor
from sparring.distributed.images import ImageUnavailable, ImageWire, NodeImages, resolve_image
from sparring.distributed.ray_runner import NODE_RESOURCE
from sparring.images.archive import import_archive
from sparring.images.registry import pull
from sparring.images.store import ImageStore
from sparring.rollout.scheduler import RolloutScheduler
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import Task, load_task, write_task
from sparring.tasks.spec import JudgeSpec, TaskSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)"),
]
HIDDEN = """\
import sys
from answer import answer


def test_answer():
    assert answer() == 42


def test_runs_on_the_image():
    assert sys.version_info[:2] == (3, 13)  # the host has another Python: the judge ran in the image
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(registry host:port, the Debian test image pushed there by tag)."""
    layout = debian_layout()
    with registry(tmp_path_factory.mktemp("registry")) as host:
        ref = f"{host}/sparring-test/debian:{DEBIAN_SUITE}"
        push(layout, ref)
        yield host, ref


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "resources": {NODE_RESOURCE: 2}},
    )
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def driver_store(tmp_path_factory) -> ImageStore:
    """The driver's image store (one for the module: the Debian image is unpacked in it once)."""
    return ImageStore(tmp_path_factory.mktemp("driver") / "images")


def _task(root: Path, image: str) -> Task:
    spec = TaskSpec(
        id="image-answer", family="code-repair",
        instruction="The function answer in answer.py returns the wrong number: make it return 42.",
        success_criteria="The hidden tests pass.",
        judge=JudgeSpec(hidden_tests=["test_hidden.py::test_answer", "test_hidden.py::test_runs_on_the_image"]),
    )  # fmt: skip
    task = write_task(
        root, spec, workspace={"answer.py": "def answer():\n    return 41\n"},
        hidden={"test_hidden.py": HIDDEN}, solution={"answer.py": "def answer():\n    return 42\n"},
    )  # fmt: skip
    raw = tomllib.loads((task.path / "task.toml").read_text())
    raw.setdefault("environment", {})["image"] = image
    (task.path / "task.toml").write_text(tomli_w.dumps(raw))
    return load_task(task.path)


def _rollouts(
    tmp_path: Path, driver: ImageStore, node_images: Path, task: Task, groups: list[int], piece: int = 0
) -> Any:
    """Roll ``task`` out once per entry of ``groups`` (its group size) on one executor: the summaries,
    the stored trajectories and the node's stats. ``piece``: the size of the pieces blobs are shipped in."""
    from sparring.policy.scripted import OraclePolicy

    tmp_path.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> Any:
        sched = RolloutScheduler(None, None, store, max_retries=0, replay_rounds=0)
        opts = RayOptions(root=tmp_path / "nodes", image_root=node_images, driver_image_root=driver.root)
        ex = make_executor("ray", sched, opts)
        if piece:
            ex.runner.blob_chunk_bytes = piece
        try:
            out = [
                await ex.rollout([task], OraclePolicy(), n, run_id=f"r{i}", seed=i)
                for i, n in enumerate(groups)
            ]
            return out, list(ex.runner.node_stats().values())
        finally:
            await ex.aclose()

    summaries, stats = asyncio.run(go())
    trajs = {s.run_id: store.search(TrajQuery(run_id=s.run_id, limit=None))[1] for s in summaries}
    return summaries, trajs, stats


def test_a_registry_image_is_pulled_by_digest_once_per_node(cluster, served, driver_store, tmp_path):
    host, tag = served
    rec = pull(driver_store, tag, insecure=True).record  # the driver resolves the tag: here, once
    node_images = tmp_path / "node-images"
    assert not ImageStore(node_images).records()  # the node's store starts empty (and is not the driver's)
    task = _task(tmp_path / "task", tag)
    summaries, trajs, stats = _rollouts(tmp_path, driver_store, node_images, task, [3, 2])
    for s in summaries:
        assert s.statuses == {"ok": s.requested}, (s.statuses, [t.error for t in trajs[s.run_id]])
    assert all(t.reward == 1.0 for ts in trajs.values() for t in ts)  # the hidden tests ran on Python 3.13
    (st,) = stats
    assert st["image_root"] == str(node_images.absolute())
    assert st["images_pulled"] == 1 and st["images_received"] == 0, st  # 5 episodes, 3 at once: one pull
    held = ImageStore(node_images).records()
    assert [r.digest for r in held] == [rec.digest]
    assert held[0].source == f"{host}/sparring-test/debian:{DEBIAN_SUITE}@{rec.digest}"  # by digest


def test_an_image_only_the_driver_has_is_shipped(cluster, driver_store, tmp_path):
    extra = tar_bytes([entry("opt/", tarfile.DIRTYPE), entry("opt/local-only", data=b"imported\n")])
    layout = layered_layout(debian_layout(), extra, tmp_path / "layout")
    rec = import_archive(driver_store, layout, tag="sparring-test/local-only:1")  # no registry
    assert resolve_image(driver_store, "sparring-test/local-only:1").pull is None  # control: nothing to pull
    node_images = tmp_path / "node-images"
    task = _task(tmp_path / "task", "sparring-test/local-only:1")
    (summary,), trajs, stats = _rollouts(tmp_path, driver_store, node_images, task, [2], piece=1 << 20)
    assert summary.statuses == {"ok": 2}, [t.error for t in trajs[summary.run_id]]
    (st,) = stats
    assert st["images_received"] == 1 and st["images_pulled"] == 0, st
    assert [r.digest for r in ImageStore(node_images).records()] == [rec.digest]
    # in 1 MiB pieces: the Debian layer took many (neither side held it whole)
    sizes = [driver_store.blob_path(d).stat().st_size for d in resolve_image(driver_store, rec.digest).blobs]
    assert st["image_pieces_received"] == sum(-(-n // (1 << 20)) for n in sizes) > len(sizes) + 2, (st, sizes)


def test_when_the_registry_fails_on_the_node_the_driver_ships_the_image(cluster, driver_store, tmp_path):
    """Registry first; an image whose registry a node cannot reach (here: gone since the driver pulled)
    comes from the driver, which holds it."""
    extra = tar_bytes([entry("opt/", tarfile.DIRTYPE), entry("opt/registry-gone", data=b"pulled\n")])
    layout = layered_layout(debian_layout(), extra, tmp_path / "layout")
    with registry(tmp_path / "registry") as host:
        tag = f"{host}/sparring-test/gone:1"
        push(layout, tag)
        rec = pull(driver_store, tag, insecure=True).record
    wire = resolve_image(driver_store, tag)
    assert wire.pull == f"{tag}@{rec.digest}" and wire.blobs  # a registry to try first, blobs to fall back on
    node_images = tmp_path / "node-images"
    task = _task(tmp_path / "task", tag)
    (summary,), trajs, stats = _rollouts(tmp_path, driver_store, node_images, task, [2])
    assert summary.statuses == {"ok": 2}, [t.error for t in trajs[summary.run_id]]
    (st,) = stats
    assert st["images_received"] == 1 and st["images_pulled"] == 0, st
    assert [r.digest for r in ImageStore(node_images).records()] == [rec.digest]


def test_an_image_no_node_can_get_is_an_infra_error_and_the_node_lives(cluster, driver_store, tmp_path):
    gone = "127.0.0.1:9/nowhere/env@sha256:" + "ab" * 32  # pinned, not on the driver, no registry there
    task = _task(tmp_path / "task", gone)
    (summary,), trajs, stats = _rollouts(tmp_path, driver_store, tmp_path / "node-images", task, [2])
    assert summary.statuses == {"infra_error": 2}
    for t in trajs[summary.run_id]:
        assert t.reward is None and "\n" not in t.error
        assert gone in t.error and "cannot pull" in t.error and "make the registry reachable" in t.error
    (st,) = stats  # the node actor answered after both failures: it did not crash
    assert st["images_pulled"] == 0 and not ImageStore(tmp_path / "node-images").records()

    tag = _task(tmp_path / "task2", "sparring-test/never-pulled:1")  # a tag the driver cannot resolve
    (summary,), trajs, _ = _rollouts(tmp_path / "t", driver_store, tmp_path / "node-images", tag, [1])
    (t,) = trajs[summary.run_id]
    assert t.status == "infra_error" and "sparring image pull sparring-test/never-pulled:1" in t.error


def test_an_image_that_is_not_the_drivers_digest_is_refused(served, tmp_path):
    """No Ray needed: the node's half with a small image, a real registry and a real store."""
    host, _ = served
    small = write_layout(tmp_path / "small", [tar_bytes([entry("hello", data=b"hi\n")])])
    other = write_layout(tmp_path / "other", [tar_bytes([entry("hello", data=b"bye\n")])])
    push(tmp_path / "small", f"{host}/sparring-test/small:1")
    node = NodeImages(ImageStore(tmp_path / "node"))

    # the registry has `small`, but the driver resolved another digest: the node runs only the driver's
    wire = ImageWire(ref="x", digest=other, pull=f"{host}/sparring-test/small@{small}")
    with pytest.raises(ImageUnavailable, match=f"not the driver's {other}: refused"):
        asyncio.run(node.ensure(wire, None))

    # shipped blobs that are not what their digests say are refused before anything is recorded
    driver = ImageStore(tmp_path / "driver")
    rec = import_archive(driver, tmp_path / "other")
    shipped = resolve_image(driver, rec.digest)
    assert shipped.pull is None and shipped.digest == other

    def pieces(d: str, size: int = 1 << 20) -> list[_Ready]:
        return [_Ready(c) for c in driver.read_blob_chunks(d, size)]

    def tampered(d: str) -> list[_Ready]:
        return [_Ready(gzip.compress(b"tampered"))] if d == rec.layers[0].digest else pieces(d)

    fresh = NodeImages(ImageStore(tmp_path / "node2"))
    with pytest.raises(ImageUnavailable, match="blobs the driver shipped were refused"):
        asyncio.run(fresh.ensure(shipped, {d: tampered(d) for d in shipped.blobs}))
    assert fresh.store.get(other) is None and fresh.received == 0

    # in pieces (here 7 bytes each): pieces out of order, or one left out, are refused; nothing recorded
    def swapped(d: str) -> list[_Ready]:
        got = pieces(d, 7)
        return got[::-1] if d == rec.layers[0].digest else got

    def short(d: str) -> list[_Ready]:
        got = pieces(d, 7)
        return got[:-1] if d == rec.config_digest else got

    for i, bad in enumerate((swapped, short)):
        node = NodeImages(ImageStore(tmp_path / f"node-bad{i}"))
        with pytest.raises(ImageUnavailable, match="does not match its digest"):
            asyncio.run(node.ensure(shipped, {d: bad(d) for d in shipped.blobs}))
        assert node.store.get(other) is None and node.received == 0
        assert not node.store.has_blob(rec.config_digest if bad is short else rec.layers[0].digest)

    # control: the same wire with the true pieces, in order, is received and recorded under the digest
    fresh = NodeImages(ImageStore(tmp_path / "node3"))
    got = asyncio.run(fresh.ensure(shipped, {d: pieces(d, 7) for d in shipped.blobs}))
    assert got.digest == other and fresh.received == 1
    sizes = [driver.blob_path(d).stat().st_size for d in shipped.blobs]
    assert fresh.received_pieces == sum(-(-n // 7) for n in sizes) > len(sizes)  # every piece, one at a time
    assert all(fresh.store.read_blob(d) == driver.read_blob(d) for d in shipped.blobs)


class _Ready:
    """Bytes behind an ``await``, as a Ray object reference gives them."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __await__(self) -> Any:
        return self.data
        yield  # a generator: what __await__ must return


def test_a_multi_platform_index_digest_is_pulled_as_this_platforms_image(served, tmp_path):
    """A task pinned by the digest of a multi-platform index the driver does not hold: the node pulls
    that index by digest and runs the manifest it names for the node's platform (the driver's digest is
    the index's: checked by the pull), and later episodes find it without pulling again."""
    from sparring.images.registry import host_platform

    host, _ = served
    arch = host_platform()[1]
    other_arch = "arm64" if arch != "arm64" else "amd64"
    idx, per_arch = index_layout(
        tmp_path / "multi",
        {
            arch: [tar_bytes([entry("which", data=f"{arch}\n".encode())])],
            other_arch: [tar_bytes([entry("which", data=f"{other_arch}\n".encode())])],
        },
    )
    push(tmp_path / "multi", f"{host}/sparring-test/multi:1", all_platforms=True)
    pinned = f"{host}/sparring-test/multi@{idx}"
    wire = resolve_image(ImageStore(tmp_path / "driver"), pinned)  # the driver does not hold it
    assert wire.digest == idx and wire.pull == pinned and not wire.blobs

    node = NodeImages(ImageStore(tmp_path / "node"))
    rec = asyncio.run(node.ensure(wire, None))
    assert rec.digest == per_arch[arch] != idx and node.pulled == 1  # this platform's manifest
    again = NodeImages(node.store)  # a restarted node actor on the same store: held, not pulled again
    assert asyncio.run(again.ensure(wire, None)).digest == per_arch[arch] and again.pulled == 0

    # control: a manifest digest is still held to exactly itself (the index's other platform is refused)
    wrong = ImageWire(ref="x", digest=per_arch[other_arch], pull=pinned)
    with pytest.raises(ImageUnavailable, match="not the driver's"):
        asyncio.run(NodeImages(ImageStore(tmp_path / "node2")).ensure(wrong, None))

    # an index with no image for this platform: one line naming what it has
    only_other, _ = index_layout(tmp_path / "other", {other_arch: [tar_bytes([entry("x", data=b"x\n")])]})
    push(tmp_path / "other", f"{host}/sparring-test/other:1", all_platforms=True)
    no_arch = resolve_image(ImageStore(tmp_path / "driver"), f"{host}/sparring-test/other@{only_other}")
    with pytest.raises(ImageUnavailable, match=f"has no linux/{arch} image .it has: linux/{other_arch}"):
        asyncio.run(NodeImages(ImageStore(tmp_path / "node3")).ensure(no_arch, None))
