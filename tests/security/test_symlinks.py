"""Symlinks planted inside never lead the host-side file API (read/write/list/delete/diff) out of the workspace."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest
from sec_support import CANARY_TEXT, in_sandbox

from sparring.sandbox.base import SandboxSpec
from tests_support import HANG_S

CANARY_BYTES = (CANARY_TEXT + "\n").encode()


def _plant(canary) -> str:
    return (
        f"ln -s {canary} /workspace/link && ln -s {canary.parent} /workspace/dirlink && "
        f"mkdir -p /workspace/deep && ln -s ../../../../../../../../..{canary} /workspace/deep/rel && "
        f"ln -s /proc/self/root{canary} /workspace/procroot && echo planted"
    )


def test_host_side_reads_do_not_follow_planted_symlinks(backend, canary):
    async def body(sb):
        assert (await sb.exec(_plant(canary))).stdout == "planted\n"
        leaks = []
        for path in ("link", "dirlink/canary.txt", "deep/rel", "procroot", "/workspace/link"):
            try:
                data = await sb.read_file(path)
            except OSError:
                continue
            leaks.append((path, data))
        try:
            listing = await sb.list_dir("dirlink")
        except OSError:
            listing = []
        return leaks, listing, await sb.diff()

    leaks, listing, diff = in_sandbox(backend, SandboxSpec(), body)
    assert all(CANARY_TEXT.encode() not in data for _, data in leaks), leaks
    assert "canary.txt" not in listing
    assert all(CANARY_TEXT.encode() not in v for v in diff.files.values())
    assert not any(k.startswith("dirlink/") for k in diff.files)


def test_host_side_writes_and_deletes_do_not_follow_planted_symlinks(backend, canary):
    async def body(sb):
        assert (await sb.exec(_plant(canary))).stdout == "planted\n"
        for path in ("link", "dirlink/canary.txt", "dirlink/new.txt", "deep/rel", "procroot"):
            with contextlib.suppress(OSError):
                await sb.write_file(path, b"pwned")
        for path in ("dirlink/canary.txt",):
            with contextlib.suppress(OSError):
                await sb.delete_file(path)
        await sb.delete_file("link")  # removes the link itself, never its target
        return await sb.exec("ls /workspace")

    r = in_sandbox(backend, SandboxSpec(), body)
    assert "link\n" not in r.stdout.replace("dirlink", "")
    assert canary.read_bytes() == CANARY_BYTES
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]


def test_symlinks_in_the_task_workspace_and_snapshots_stay_inert(backend, canary, tmp_path):
    ws = tmp_path / "evil-task"
    ws.mkdir()
    (ws / "ok.txt").write_text("fine\n")
    os.symlink(canary, ws / "link")  # a malicious task ships a link to a host file

    async def body(sb):
        inside = await sb.exec("cat /workspace/link; cat /workspace/ok.txt")
        await sb.exec(f"ln -s {canary.parent} /workspace/planted")
        snap = await sb.snapshot()
        await sb.restore(snap)
        reads = []
        for path in ("link", "planted/canary.txt"):
            with contextlib.suppress(OSError):
                reads.append(await sb.read_file(path))
        with pytest.raises(OSError):
            await sb.write_file("planted/x.txt", b"pwned")
        return inside, reads, await sb.diff()

    inside, reads, diff = in_sandbox(backend, SandboxSpec(workspace=ws), body)
    assert inside.stdout == "fine\n"  # the link dangles inside: the host file is not there
    assert all(CANARY_TEXT.encode() not in data for data in reads)
    assert all(CANARY_TEXT.encode() not in v for v in diff.files.values())
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]


FLIP_DIR = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
target, end = sys.argv[1], time.monotonic() + 3
os.chdir("/workspace")
os.makedirs("d", exist_ok=True)  # the host's write_file may have made it already
os.symlink(target, "e")
for i in range(2000000):
    if i % 1000 == 0 and time.monotonic() > end:
        break
    if libc.renameat2(-100, b"d", -100, b"e", 2) != 0:  # RENAME_EXCHANGE: d <-> e atomically
        sys.exit("renameat2: errno %d" % ctypes.get_errno())
"""


def test_swapping_a_directory_for_a_symlink_races_no_host_write(backend, canary):
    # Inside: swap /workspace/d between a real directory and a link to the host dir (for 3 s at most)
    # while the host writes d/dropped.txt again and again.
    flipper = ["python3", "-c", FLIP_DIR, str(canary.parent)]

    async def body(sb):
        flip = asyncio.ensure_future(sb.exec(flipper, timeout=HANG_S))  # it stops itself after 3 s
        writes = 0
        while not flip.done() and writes < 5000:
            with contextlib.suppress(OSError):
                await sb.write_file("d/dropped.txt", b"pwned")
            writes += 1
            await asyncio.sleep(0)
        r = await flip
        assert r.exit_code == 0 and not r.timed_out, r.stderr
        return writes

    writes = in_sandbox(backend, SandboxSpec(), body)
    assert writes > 10  # the race was actually run
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]
    assert canary.read_bytes() == CANARY_BYTES
