"""Quotas hold against bombs: memory, disk and output stay bounded and are reported."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from sec_support import in_sandbox

from sparring.sandbox.base import SandboxSpec
from tests_support import ROOT_ONLY


@ROOT_ONLY
def test_memory_bomb_is_oom_killed(backend):
    # touches every page (b"x" * n), at most 768 MiB; the limit is 64 MiB
    bomb = "chunks = []\nfor i in range(96):\n    chunks.append(b'x' * (8 << 20))\nprint('survived')"

    async def body(sb):
        bomb_r = await sb.exec(["python3", "-c", bomb], timeout=30)
        return bomb_r, await sb.exec("echo alive")

    r, after = in_sandbox(backend, SandboxSpec(memory_mb=64), body)
    assert r.oom_killed and r.exit_code != 0
    assert "survived" not in r.stdout
    assert after.stdout == "alive\n" and not after.oom_killed


@ROOT_ONLY
def test_disk_fill_hits_the_quota_inside_and_on_the_host_side(backend):
    async def body(sb):
        fill = await sb.exec(
            "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; echo; stat -c %s /workspace/fill",
            timeout=30,
        )
        with pytest.raises(OSError) as exc:
            await sb.write_file("more.bin", b"\0" * (16 << 20))
        await sb.delete_file("fill")
        await sb.delete_file("more.bin")
        again = await sb.exec("echo ok > /workspace/small && cat /workspace/small")
        return fill, exc.value, again

    fill, err, again = in_sandbox(backend, SandboxSpec(disk_mb=8), body)
    assert "No space left on device" in fill.stdout
    assert int(fill.stdout.split()[-1]) <= 8 << 20
    assert err.errno == errno.ENOSPC
    assert again.stdout == "ok\n"  # freeing space makes the sandbox usable again


def test_disk_fill_leaves_nothing_on_the_host_after_close(backend):
    async def body(sb):
        r = await sb.exec(
            "dd if=/dev/zero of=/workspace/fill bs=1M count=4 2>/dev/null; stat -c %s /workspace/fill"
        )
        return sb, r

    # This sandbox's own directory and mounts, not a listing of the shared sandbox home: other
    # processes (another test run on the same machine) create and remove theirs meanwhile.
    sb, r = in_sandbox(backend, SandboxSpec(disk_mb=8), body)
    assert r.stdout.strip() == str(4 << 20)  # the fill was really written
    d = Path(sb.dir)
    assert not d.exists()
    assert [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines() if str(d) in ln] == []


def test_runaway_output_is_capped_with_a_marker(backend):
    async def body(sb):
        finite = await sb.exec(
            "head -c 20000000 /dev/zero | tr '\\0' x; head -c 20000000 /dev/zero | tr '\\0' y >&2"
        )
        endless = await sb.exec("yes | head -c 4000000000", timeout=3)  # bounded by the timeout and by 4 GB
        return finite, endless

    finite, endless = in_sandbox(backend, SandboxSpec(), body)
    for text in (finite.stdout, finite.stderr, endless.stdout):
        assert len(text) < 2 << 20  # kept well under the 20 MB written
        assert "truncated" in text[-200:]  # and the cut is marked
    assert finite.truncated and finite.exit_code == 0
    assert endless.truncated and len(endless.stdout) > 100_000
