"""What the agent makes in its sandbox cannot hurt the host when the host diffs, snapshots, restores or deletes it.

Each attack is built inside a real sandbox, with a positive control that it
was really built, and the test asserts containment: host memory and the
layer store stay bounded, a refusal is typed (a flagged diff, a
WorkspaceFault), and the backend, later sandboxes and a new backend on the
same root are unaffected. Payloads are bounded: a sparse file made with
truncate (no blocks), a 1,200-deep directory chain, a swap loop that stops
itself; the only host path involved is a canary under the test's tmp dir.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from sec_support import CANARY_TEXT, run

from sparring.errors import WorkspaceFault
from sparring.sandbox.base import SandboxSpec, WorkspaceDiff
from sparring.sandbox.local.backend import LocalBackend
from tests_support import HANG_S

SPARSE = 1536 << 20  # 1.5 GiB apparent, no block written
DEPTH = 1200


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _store_bytes(root: Path) -> int:
    """Blocks really used under the layer store (sparse files count what they occupy)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root / "layers"):
        for f in files:
            total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total


@pytest.fixture(params=["overlay", "copy"])
def any_backend(request, tmp_path) -> LocalBackend:
    """A fresh backend of each mode (copy: the non-root fallback, forced)."""
    b = LocalBackend(root=tmp_path / "root", mode="auto" if request.param == "overlay" else "copy")
    if request.param == "overlay" and not b.overlay:
        pytest.skip("overlay mode needs root")
    return b


@pytest.fixture
def ws(tmp_path) -> Path:
    d = tmp_path / "ws"
    (d / "pkg").mkdir(parents=True)
    (d / "pkg" / "mod.py").write_text("X = 1\n")
    return d


def test_a_sparse_file_beyond_the_quota_costs_the_host_neither_memory_nor_disk(any_backend, ws):
    b = any_backend
    spec = SandboxSpec(workspace=ws, disk_mb=256)

    async def body():
        sb = await b.create(spec)
        try:
            made = await sb.exec(
                f"truncate -s {SPARSE} big.bin && stat -c '%s %b' big.bin && echo Y=2 > pkg/mod.py"
            )
            before_rss, before_store = _peak_rss(), _store_bytes(b.root)
            tracemalloc.start()
            try:
                diff = await sb.diff()
                try:
                    await sb.snapshot()
                    fault = None
                except WorkspaceFault as e:
                    fault = e
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            grown_rss, grown_store = _peak_rss() - before_rss, _store_bytes(b.root) - before_store
            leftovers = [p.name for p in (b.root / "layers").iterdir() if p.name.startswith(".tmp-")]
            try:  # the agent's read_file tool: refused by apparent size, never read
                await sb.read_file("big.bin")
                read_error = None
            except OSError as e:
                read_error = e
            still = await sb.exec("rm big.bin && echo alive")
            small_snap = await sb.snapshot()  # within the quota again: snapshots work
            return made, diff, fault, read_error, peak, grown_rss, grown_store, leftovers, still, small_snap
        finally:
            await sb.close()

    made, diff, fault, read_error, peak, grown_rss, grown_store, leftovers, still, small_snap = run(body())
    size, blocks = made.stdout.split()
    assert (
        made.exit_code == 0 and int(size) == SPARSE and int(blocks) < 64
    )  # positive control: sparse, 1.5 GiB
    assert diff.flags == ("workspace_too_large",) and not diff.files and "MiB" in diff.detail
    assert len(json.dumps(diff.to_json())) < 4096  # the record stays small
    assert isinstance(fault, WorkspaceFault) and fault.flag == "workspace_too_large"
    assert isinstance(read_error, OSError) and read_error.errno == errno.EFBIG
    assert peak < 32 << 20, f"host Python memory peaked at {peak >> 20} MiB"
    assert grown_rss < 200 << 20, f"host peak RSS grew by {grown_rss >> 20} MiB"
    assert grown_store < 8 << 20 and leftovers == []
    assert still.stdout.strip() == "alive" and small_snap.startswith("snap-")


def test_a_sparse_file_within_the_quota_stays_sparse_in_the_layer_store(any_backend, ws):
    b = any_backend

    async def body():
        sb = await b.create(SandboxSpec(workspace=ws, disk_mb=256))
        try:
            made = await sb.exec(
                "truncate -s 100M hole.bin && printf tail >> hole.bin && stat -c %s hole.bin"
            )
            diff = await sb.diff()  # a 100 MiB file is beyond what one diff carries (diff_caps), quota or not
            sid = await sb.snapshot()
            await sb.exec("rm hole.bin")
            await sb.restore(sid)
            back = await sb.exec("stat -c %s hole.bin && tail -c 4 hole.bin")
            return made, diff, sid, back
        finally:
            await sb.close()

    made, diff, sid, back = run(body())
    assert made.stdout.strip() == str((100 << 20) + 4)  # positive control
    assert diff.flags == ("workspace_too_large",) and "32 MiB" in diff.detail
    layer = b.snapshots[sid][0]
    st = os.lstat(layer / "hole.bin")
    assert st.st_size == (100 << 20) + 4 and st.st_blocks * 512 < 1 << 20  # kept sparse on the host
    assert back.stdout.split() == [str((100 << 20) + 4), "tail"]


def test_a_flagged_diff_is_scored_zero_with_its_flag_never_infra_error_or_judged():
    from sparring.rollout.episode import score_trajectory
    from sparring.trajectory import Trajectory

    class Judge:  # would give full marks to anything it saw
        version = "always-1"
        calls = 0

        async def score(self, task, diff):
            Judge.calls += 1
            raise AssertionError("a flagged diff must not be judged")

    traj = Trajectory(task_id="t", task_digest="d", policy="p", status="ok")
    diff = WorkspaceDiff(flags=("workspace_too_large",), detail="too big")
    run(score_trajectory(traj, None, WorkspaceDiff.from_json(diff.to_json()), Judge()))  # type: ignore[arg-type]
    assert traj.reward == 0.0 and traj.flags == ["workspace_too_large"] and traj.status == "ok"
    assert Judge.calls == 0


def test_names_that_are_not_utf8_break_nothing(any_backend, ws):
    b = any_backend
    make = (
        "python3 -c \"import os; open(b'\\xff\\xfe-odd.txt', 'wb').write(b'x'); "
        "os.mkdir(b'dir-\\xc3'); open(b'dir-\\xc3/in.txt', 'wb').write(b'y'); "
        "print(sum(1 for n in os.listdir(b'.') if b'\\xff' in n or b'\\xc3' in n))\""
    )

    async def body():
        sb = await b.create(SandboxSpec(workspace=ws))
        try:
            made = await sb.exec(make + " && echo Y=2 > pkg/mod.py")
            diff = await sb.diff()
            listed = await sb.list_dir()  # what the agent's list_dir tool shows
            sid = await sb.snapshot()
            await sb.reset()
            gone = await sb.exec("ls")
            await sb.restore(sid)
            back = await sb.exec(
                "python3 -c \"import os; print(open(b'dir-\\xc3/in.txt').read(), len(os.listdir(b'.')))\""
            )
            return made, diff, listed, gone, back
        finally:
            await sb.close()

    made, diff, listed, gone, back = run(body())
    assert made.exit_code == 0 and made.stdout.strip() == "2"  # positive control: both odd names exist
    assert diff.flags == ("unrepresentable_path",) and diff.files == {"pkg/mod.py": b"Y=2\n"}
    json.dumps(diff.to_json())  # the record is valid JSON
    assert "\\xff\\xfe-odd.txt" in listed and "dir-\\xc3/" in listed
    json.dumps(listed)  # so is a tool observation listing them
    assert "odd" not in gone.stdout
    assert back.exit_code == 0 and back.stdout.split() == ["y", "3"]  # the snapshot kept the raw names


def test_a_deep_tree_neither_breaks_the_diff_nor_any_later_backend(tmp_path, ws):
    """1,200 nested directories: diff, snapshot, reset and close work; once the snapshot's owner is dead a
    new backend on the same root starts, garbage-collects the deep layer and serves sandboxes."""
    root = tmp_path / "root"
    mk = f"python3 -c \"import os\nfor i in range({DEPTH}): os.mkdir('d'); os.chdir('d')\nopen('f.txt','w').write('deep')\""
    deep_rel = "/".join(["deep"] + ["d"] * DEPTH + ["f.txt"])
    for mode in ("copy", "auto"):
        b = LocalBackend(root=root, mode=mode)

        async def body(b=b):
            sb = await b.create(SandboxSpec(workspace=ws))
            try:
                made = await sb.exec(
                    f"mkdir deep && cd deep && {mk} && find . -name f.txt | tr -cd / | wc -c"
                )
                diff = await sb.diff()
                sid = await sb.snapshot()
                await sb.reset()
                after_reset = await sb.exec("ls")
                await sb.restore(sid)
                made_again = await sb.exec("find deep -name f.txt | wc -l")
                return made, diff, sid, after_reset, made_again
            finally:
                await sb.close()

        made, diff, sid, after_reset, made_again = run(body())
        assert made.exit_code == 0 and int(made.stdout) == DEPTH + 1, made  # positive control: 1,200 levels
        assert diff.files.get(deep_rel) == b"deep" and not diff.flags
        assert "deep" not in after_reset.stdout and made_again.stdout.strip() == "1"
        assert b.snapshots[sid][0].is_dir()

    # Hand the snapshot records to a dead owner, age the layers: the next backend's start-up gc removes them.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    records = root / "snapshots"
    os.rename(records / str(os.getpid()), records / str(dead.pid))
    deep_layers = [p for p in (root / "layers").iterdir() if p.name.startswith("L-")]
    old = time.time() - 3600
    for p in deep_layers:
        os.utime(p, (old, old))
    fresh = LocalBackend(root=root)
    assert deep_layers and not any(p.exists() for p in deep_layers)

    async def later():
        sb = await fresh.create(SandboxSpec(workspace=ws))
        try:
            return await sb.exec("cat pkg/mod.py")
        finally:
            await sb.close()

    assert run(later()).stdout == "X = 1\n"


def test_copy_mode_snapshots_never_pull_host_content_through_a_swapped_symlink(tmp_path, ws):
    """The agent swaps a directory for a symlink to a host directory while the host copies the tree:
    the sandbox is frozen during the copy and no link is followed, so the layer holds the link, never
    the host's files, and the restored sandbox cannot read them."""
    canary_dir = tmp_path / "host-secrets"
    canary_dir.mkdir()
    (canary_dir / "canary.txt").write_text(CANARY_TEXT + "\n")
    b = LocalBackend(root=tmp_path / "root", mode="copy")
    swapper = (
        "import os, time\n"
        "os.makedirs('box/real', exist_ok=True); open('box/real/own.txt', 'w').write('own')\n"
        "n, end = 0, time.time() + 600\n"  # ended by 'stop' (or the close): 60 s could run out on a slow host
        "while time.time() < end and not os.path.exists('stop'):\n"
        f"    os.rename('box/real', 'box/held'); os.symlink({str(canary_dir)!r}, 'box/real'); time.sleep(0.001)\n"
        "    os.unlink('box/real'); os.rename('box/held', 'box/real'); n += 1\n"
        "    if n % 50 == 0: open('count.tmp', 'w').write(str(n)); os.rename('count.tmp', 'count')\n"
    )
    tries = 100

    async def body():
        sb = await b.create(SandboxSpec(workspace=ws))
        try:
            await sb.write_file("swap.py", swapper.encode())
            await sb.exec("python3 swap.py > /dev/null 2>&1 &")
            started = await sb.exec(
                f"for i in $(seq {int(HANG_S / 0.05)}); do [ -e count ] && break; sleep 0.05; done; cat count",
                timeout=HANG_S + 10,
            )
            sids = []
            for i in range(tries):
                await asyncio.sleep(0.001 * (i % 7))  # let the swapper run between two frozen copies
                sids.append(await sb.snapshot())
            await sb.exec("touch stop; sleep 0.2")
            swaps = await sb.read_file("count")
            linked = [s for s in set(sids) if os.path.islink(b.snapshots[s][0] / "box" / "real")]
            await sb.restore(linked[0] if linked else sids[-1])
            seen = await sb.exec("cat box/real/canary.txt; grep -rs sparring-canary /workspace; ls box/real")
            return started, set(sids), int(swaps), linked, seen
        finally:
            await sb.close()

    started, sids, swaps, linked, seen = run(body())
    assert int(started.stdout) >= 50 and swaps >= int(started.stdout)  # positive control: the swapper ran
    assert linked, "no snapshot caught the directory swapped for the link (the race never happened)"
    for sid in sids:
        layer = b.snapshots[sid][0]
        for dirpath, _dirs, files in os.walk(layer):
            for f in files:
                p = os.path.join(dirpath, f)
                if not os.path.islink(p):
                    assert CANARY_TEXT.encode() not in Path(p).read_bytes(), f"host content in {p}"
    assert CANARY_TEXT not in seen.stdout
    assert (canary_dir / "canary.txt").read_text() == CANARY_TEXT + "\n"  # the host canary is untouched
