"""The local backend with real bubblewrap, overlayfs, tmpfs and cgroups."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from tests_support import ROOT_ONLY, procs_with


def run(coro):
    return asyncio.run(coro)


async def _with(backend, spec, fn):
    sb = await backend.create(spec)
    try:
        return await fn(sb)
    finally:
        await sb.close()


def test_writes_are_copy_on_write(backend, workspace):
    async def body(sb):
        r = await sb.exec("echo x > /workspace/f.txt; cat /workspace/f.txt")
        assert r.exit_code == 0 and r.stdout == "x\n"
        return await sb.diff()

    diff = run(_with(backend, SandboxSpec(workspace=workspace), body))
    assert (workspace / "f.txt").read_text() == "orig\n"
    assert diff.files == {"f.txt": b"x\n"} and diff.deleted == ()


def test_reset_discards_agent_writes(backend, workspace):
    async def body(sb):
        await sb.exec("echo new > /workspace/new.txt; rm /workspace/f.txt")
        d1 = await sb.diff()
        await sb.reset()
        return d1, await sb.diff(), await sb.list_dir()

    d1, d2, listing = run(_with(backend, SandboxSpec(workspace=workspace), body))
    assert d1.files == {"new.txt": b"new\n"} and d1.deleted == ("f.txt",)
    assert d2.is_empty()
    assert listing == ["f.txt", "sub/"]


def test_snapshot_and_restore(backend, workspace):
    async def body(sb):
        await sb.write_file("a.txt", b"A")
        snap = await sb.snapshot()
        await sb.write_file("b.txt", b"B")
        await sb.restore(snap)
        after_restore = await sb.list_dir()
        other = await backend.create(SandboxSpec(workspace=workspace), snapshot=snap)
        try:
            forked = (await other.read_file("a.txt"), await other.list_dir())
        finally:
            await other.close()
        await sb.reset()
        return after_restore, forked, await sb.list_dir()

    after_restore, forked, after_reset = run(_with(backend, SandboxSpec(workspace=workspace), body))
    assert after_restore == ["a.txt", "f.txt", "sub/"]
    assert forked == (b"A", ["a.txt", "f.txt", "sub/"])
    assert after_reset == ["f.txt", "sub/"]


def test_timeout_kills_the_whole_process_tree(backend):
    marker = f"sleep {4000 + uuid.uuid4().int % 1000}"

    async def body(sb):
        # a background child, a grandchild in its own session, and a foreground sleep
        return await sb.exec(f"({marker} &) ; setsid {marker} & {marker}", timeout=1)

    r = run(_with(backend, SandboxSpec(), body))
    assert r.timed_out and r.exit_code == 124
    assert procs_with(marker) == []


def test_runs_unprivileged_without_network_or_host_view(backend):
    async def body(sb):
        return await sb.exec(
            "id -u; hostname; ls /proc | grep -c '^[0-9]'; "
            "python -c 'import socket; socket.create_connection((\"10.255.255.1\", 80), timeout=1)' 2>&1 | tail -1; "
            "cat /root/.bash_history 2>&1 | head -1; touch /usr/x 2>&1 | head -1"
        )

    r = run(_with(backend, SandboxSpec(), body))
    lines = r.stdout.splitlines()
    assert lines[0] == "1000"
    assert lines[1] == "sandbox"
    assert int(lines[2]) <= 5  # only the sandbox's own processes are visible
    assert "unreachable" in lines[3].lower()
    assert "No such file" in lines[4] or "Permission denied" in lines[4]
    assert "Read-only" in lines[5] or "Permission denied" in lines[5]


def test_memory_limit_reports_oom(backend):
    async def body(sb):
        return await sb.exec(["python", "-c", "x = bytearray(400 * 1024 * 1024); print('survived')"])

    r = run(_with(backend, SandboxSpec(memory_mb=64), body))
    assert r.exit_code != 0 and "survived" not in r.stdout
    if backend.overlay:
        assert r.oom_killed
    else:  # without root: an address-space rlimit, so the allocation fails instead (README)
        assert "MemoryError" in r.stderr and not r.oom_killed


def test_pids_limit_stops_fork_bombs(backend):
    async def body(sb):
        return await sb.exec("for i in $(seq 100); do sleep 3 & done 2>&1 | head -1; echo done", timeout=10)

    r = run(_with(backend, SandboxSpec(pids=16), body))
    assert "fork" in (r.stdout + r.stderr).lower() or "resource" in (r.stdout + r.stderr).lower()


@ROOT_ONLY
def test_disk_quota(backend, workspace):
    async def body(sb):
        return await sb.exec("head -c 8000000 /dev/zero > /workspace/big")

    r = run(_with(backend, SandboxSpec(workspace=workspace, disk_mb=2), body))
    assert r.exit_code != 0 and "No space left" in r.stderr


def test_host_side_file_access_never_follows_symlinks(backend, workspace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")

    async def body(sb):
        await sb.exec(f"ln -s {secret} /workspace/link; ln -s /etc /workspace/etcdir")
        with pytest.raises(OSError):
            await sb.read_file("link")
        with pytest.raises(OSError):
            await sb.write_file("etcdir/evil", b"x")
        with pytest.raises(SandboxError):
            await sb.read_file("../../../etc/passwd")
        return await sb.diff()

    diff = run(_with(backend, SandboxSpec(workspace=workspace), body))
    assert "link" not in diff.files and secret.read_text() == "host secret"


def test_output_is_capped_with_a_marker(backend):
    async def body(sb):
        return await sb.exec("head -c 3000000 /dev/zero | tr '\\0' a")

    r = run(_with(backend, SandboxSpec(), body))
    assert r.truncated and "output truncated" in r.stdout and len(r.stdout) < 1_100_000


def test_command_not_found_is_127(backend):
    r = run(_with(backend, SandboxSpec(), lambda sb: sb.exec(["definitely-not-a-command"])))
    assert r.exit_code == 127 and "not found" in r.stderr


def test_close_leaves_nothing_behind(backend, workspace):
    async def body():
        sb = await backend.create(SandboxSpec(workspace=workspace, memory_mb=64))
        d = sb.dir
        cg = dict(sb.cg.dirs)
        await sb.exec("true")
        await sb.close()
        return d, cg

    d, cg = run(body())
    assert not d.exists()
    assert all(not p.exists() for p in cg.values())
    with open("/proc/self/mountinfo") as f:
        assert str(d) not in f.read()


def test_reaper_cleans_sandboxes_of_dead_owners(backend, workspace):
    from sparring.sandbox.local.backend import LocalBackend

    async def body():
        sb = await backend.create(SandboxSpec(workspace=workspace))
        (sb.dir / "owner").write_text("999999999")  # an owner that does not exist
        return sb.dir

    d = run(body())
    assert d.exists()
    LocalBackend(root=backend.root)  # a restarted pool reaps on start
    assert not d.exists()


def test_reaper_spares_a_sandbox_dir_still_being_created(tmp_path):
    """Another process's reap must not remove a sandbox dir whose owner file is not written yet."""
    from sparring.sandbox.isolation import reaper

    root = tmp_path / "sbroot"
    root.mkdir()
    home = reaper.sandbox_home(root)
    young, old = home / "sb-young", home / "sb-old"
    young.mkdir()
    old.mkdir()
    past = time.time() - reaper.UNOWNED_GRACE_S - 5
    os.utime(old, (past, past))
    assert reaper.reap(root) == 1
    assert young.exists() and not old.exists()
    (young / "owner").write_text("999999999")  # its creator died after writing the owner
    assert reaper.reap(root) == 1
    assert not young.exists()


def test_workspace_must_exist(backend, tmp_path):
    with pytest.raises(SandboxError):
        run(backend.create(SandboxSpec(workspace=tmp_path / "missing")))


def test_environment_is_fixed(backend):
    r = run(_with(backend, SandboxSpec(seed=7), lambda sb: sb.exec("echo $TZ $LANG $PYTHONHASHSEED $HOME")))
    assert r.stdout.split() == ["UTC", "C.UTF-8", "7", "/home/agent"]
    assert os.environ.get("SPARRING_SANDBOX_MARK") is None


def test_environment_under_tmp_is_visible(tmp_path):
    """A venv that lives under /tmp (a clone in /tmp) must not be hidden by the sandbox's own /tmp."""
    import sys

    from sparring.sandbox.environment import SandboxEnvironment
    from sparring.sandbox.local.backend import LocalBackend

    env_dir = tmp_path / "env" / "bin"
    env_dir.mkdir(parents=True)
    tool = env_dir / "hello-from-tmp"
    tool.write_text("#!/bin/sh\necho hi from tmp\n")
    tool.chmod(0o755)
    base = SandboxEnvironment.current_python()
    env = SandboxEnvironment(
        ro_paths=(*base.ro_paths, tmp_path / "env"), path_dirs=(str(env_dir), *base.path_dirs)
    )
    b = LocalBackend(root=tmp_path / "sbroot", environment=env)
    r = run(_with(b, SandboxSpec(), lambda sb: sb.exec(["hello-from-tmp"])))
    assert r.exit_code == 0 and r.stdout == "hi from tmp\n", (r, sys.prefix)


def test_reaper_drops_snapshot_layers_of_dead_backends(backend, workspace):
    from sparring.sandbox.local.backend import LocalBackend

    async def body():
        sb = await backend.create(SandboxSpec(workspace=workspace))
        try:
            await sb.write_file("kept.txt", uuid.uuid4().hex.encode())
            return await sb.snapshot()
        finally:
            await sb.close()

    sid = run(body())
    live = backend.snapshots[sid][0]
    # a snapshot recorded by an owner that no longer exists, with a layer only it needs
    dead_rec = backend.root / "snapshots" / "999999999"
    dead_rec.mkdir()
    dead_layer = backend.root / "layers" / ("L-" + "0" * 64)
    dead_layer.mkdir()
    os.utime(dead_layer, (1, 1))  # old enough for the collector
    (dead_rec / "snap-00000000000000000000").write_text(f"{workspace}\n{dead_layer.name}\n")
    LocalBackend(root=backend.root)
    assert live.exists() and (live / "kept.txt").exists()
    assert not dead_layer.exists() and not dead_rec.exists()
