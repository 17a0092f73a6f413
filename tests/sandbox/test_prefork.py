"""Pre-started sandboxes (sandbox/local/prefork.py): as a cold one in every respect, never another shape's,
reset, snapshot and restore as usual, and reaped with their owner."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparring.errors import ConfigError, SandboxError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.config import LocalBackendConfig, make_backend
from sparring.sandbox.isolation import mounts
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.storage.layers import tree_digest
from tests_support import ROOT_ONLY, wait_until

pytestmark = ROOT_ONLY

# Everything a command can see of its sandbox's initial state. /proc/self/... of the shell that runs it.
PROBE = r"""
echo "== id"; id; hostname
echo "== env"; env | sort
echo "== status"; grep -E '^(Uid|Gid|Groups|Cap|NoNewPrivs|Seccomp)' /proc/self/status
echo "== limits"; cat /proc/self/limits
echo "== cgroup"; cat /proc/self/cgroup
echo "== procs"; ls -d /proc/[0-9]*
echo "== empty"; ls -la /tmp /dev/shm /home/agent /dev/mqueue | grep -v ' \.\.$' | awk '{print $1, $3, $4, $NF}'
echo "== ipc"; cat /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem
echo "== net"; cat /proc/net/dev | cut -d: -f1; echo "== lo-up"; cat /proc/net/if_inet6
echo "== df"; df -k /tmp /workspace /dev/shm /home/agent | awk '{print $2, $6}'
echo "== workspace"; ls -la /workspace | awk '{print $1, $3, $NF}'; cat /workspace/f.txt
echo "== mounts"; cat /proc/self/mountinfo
"""
_SB_ID = re.compile(r"sb-[0-9]+-[0-9a-f]{12}")


def _normalize(out: str) -> dict[str, list[str]]:
    """The probe's sections; mounts without their ids, peer groups and device numbers (they differ
    between any two sandboxes), the sandbox's own directory name replaced."""
    sections: dict[str, list[str]] = {}
    cur = ""
    for line in _SB_ID.sub("sb-X", out).splitlines():
        if line.startswith("== "):
            cur = line[3:]
            sections[cur] = []
        elif cur == "mounts":
            pre, _, post = line.partition(" - ")
            f = pre.split()
            sections[cur].append(" ".join([f[3], f[4], f[5], post]))
        else:
            sections[cur].append(line)
    sections["mounts"].sort()
    return sections


@pytest.fixture
def ws(tmp_path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    (d / "f.txt").write_text("orig\n")
    return d


@pytest.fixture
def pf_backend(tmp_path):
    b = LocalBackend(root=tmp_path / "sbroot", prefork=1)
    yield b
    asyncio.run(b.aclose())


@pytest.mark.parametrize("network", ["none", "loopback"])
def test_a_prestarted_sandbox_is_indistinguishable_from_a_cold_one(pf_backend, ws, network):
    cold_backend = LocalBackend(root=pf_backend.root, prefork=0)
    spec = SandboxSpec(
        workspace=ws, workspace_digest=tree_digest(ws), memory_mb=128, pids=64, cpus=1.0, disk_mb=64,
        nofile=512, seed=11, env={"MARK": "m1"}, network=network,
    )  # fmt: skip

    async def probe(b: LocalBackend) -> tuple[dict[str, list[str]], dict[str, str]]:
        sb = await b.create(spec)
        try:
            r = await sb.exec(PROBE)
            assert r.exit_code == 0, r.stderr
            limits = {
                f"{c}/{f.name}": f.read_text().strip()
                for c, d in sb.cg.dirs.items()
                for f in sorted(d.iterdir())
                if f.name
                in ("memory.limit_in_bytes", "memory.max", "pids.max", "cpu.cfs_quota_us", "cpu.max")
            }
            return _normalize(r.stdout), limits
        finally:
            await sb.close()

    async def main():
        assert await pf_backend.prefork.fill(spec) == 1
        ready = {s.id for s in pf_backend.prefork.idle()}
        warm = await probe(pf_backend)
        assert pf_backend.prefork.hits == 1 and not ready & {s.id for s in pf_backend.prefork.idle()}
        return warm, await probe(cold_backend)

    (warm, warm_limits), (cold, cold_limits) = asyncio.run(main())
    assert cold["env"] and "MARK=m1" in cold["env"] and "PYTHONHASHSEED=11" in cold["env"]
    assert cold["workspace"][-1] == "orig" and len(cold["procs"]) == 3  # the server, the probe, its ls
    assert cold_limits and "134217728" in cold_limits.values()  # the limits are there to compare
    assert bool(cold["lo-up"]) == (network == "loopback")  # ::1 only on a loopback that is up
    for section in cold:
        assert warm[section] == cold[section], section
    assert warm_limits == cold_limits


def test_a_sandbox_is_only_handed_to_a_spec_of_its_shape(pf_backend, ws, tmp_path):
    other_ws = tmp_path / "ws2"
    other_ws.mkdir()
    (other_ws / "f.txt").write_text("other\n")
    a = SandboxSpec(workspace=ws, memory_mb=128, network="none")
    differing = [
        a.model_copy(update={"memory_mb": 256}),
        a.model_copy(update={"network": "loopback"}),
        a.model_copy(update={"pids": 64}),
        a.model_copy(update={"disk_mb": 64}),
        a.model_copy(update={"extra_ro": {"/opt/assets": other_ws}}),
    ]
    same_shape = a.model_copy(update={"workspace": other_ws, "env": {"MARK": "b"}, "seed": 5})

    async def main():
        await pf_backend.prefork.fill(a)
        (waiting,) = pf_backend.prefork.idle()
        for spec in differing:
            sb = await pf_backend.create(spec)
            try:
                assert sb.id != waiting.id and waiting in pf_backend.prefork.idle(), spec
                await pf_backend.prefork.fill(spec)  # its own shape's pool fills; a's is left alone
            finally:
                await sb.close()
        assert pf_backend.prefork.hits == 0 and waiting in pf_backend.prefork.idle()
        sb = await pf_backend.create(same_shape)  # another workspace, env and seed: the same shape
        try:
            assert sb.id == waiting.id and pf_backend.prefork.hits == 1
            r = await sb.exec("cat /workspace/f.txt; echo $MARK $PYTHONHASHSEED")
            assert r.stdout == "other\nb 5\n", r
            assert (await sb.read_file("f.txt")) == b"other\n"
        finally:
            await sb.close()

    asyncio.run(main())


def test_a_prestarted_sandbox_resets_snapshots_and_restores_like_a_cold_one(pf_backend, ws):
    spec = SandboxSpec(workspace=ws, memory_mb=128)

    async def main():
        await pf_backend.prefork.fill(spec)
        sb = await pf_backend.create(spec)
        try:
            assert pf_backend.prefork.hits == 1
            await sb.exec("echo new > /workspace/f.txt; echo t > /tmp/t; echo s > /dev/shm/s")
            assert (await sb.diff()).files == {"f.txt": b"new\n"}
            sid = await sb.snapshot()
            await sb.exec("rm /workspace/f.txt")
            await sb.restore(sid)
            assert (await sb.exec("cat /workspace/f.txt")).stdout == "new\n"
            await sb.reset()
            r = await sb.exec("cat /workspace/f.txt; ls -A /tmp /dev/shm")
            assert r.stdout == "orig\n/dev/shm:\n\n/tmp:\n", r
            assert (await sb.diff()).is_empty()
        finally:
            await sb.close()
        assert not sb.dir.exists()
        # A sandbox forked from that snapshot is served pre-started too, with the snapshot's files.
        await pf_backend.prefork.fill(spec)
        forked = await pf_backend.create(spec, snapshot=sid)
        try:
            assert pf_backend.prefork.hits == 2
            assert (await forked.exec("cat /workspace/f.txt")).stdout == "new\n"
        finally:
            await forked.close()

    asyncio.run(main())


OWNER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from sparring.sandbox.base import SandboxSpec
    from sparring.sandbox.local.backend import LocalBackend

    async def main():
        b = LocalBackend(root=Path(sys.argv[1]), prefork=2)
        await b.prefork.fill(SandboxSpec(memory_mb=128, pids=64))
        for sb in b.prefork.idle():
            print(sb.dir, sb.channel.proc.pid, *sb.cg.dirs.values(), flush=True)
        print("ready", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def test_prestarted_sandboxes_are_reaped_when_their_owner_dies(tmp_path):
    root = tmp_path / "sbroot"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "ready":
                break
            lines.append(line.split())
        # Positive control: two started sandboxes, their bubblewrap running, their cgroups there.
        assert len(lines) == 2 and all(Path(f"/proc/{ln[1]}").exists() for ln in lines)
        assert all(Path(c).is_dir() for ln in lines for c in ln[2:]) and len(lines[0]) == 5
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    dirs = [Path(ln[0]) for ln in lines]

    def left() -> list[str]:
        out = [f"dir {d}" for d in dirs if d.exists()]
        out += [f"mount {m}" for d in dirs for m in mounts.mounts_below(d)]
        out += [f"cgroup {c}" for ln in lines for c in ln[2:] if Path(c).exists()]
        return out + [f"bubblewrap {ln[1]}" for ln in lines if Path(f"/proc/{ln[1]}").exists()]

    assert wait_until(lambda: not left()), left()


def test_prefork_is_configured_per_backend(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARRING_SANDBOX_PREFORK", raising=False)
    assert LocalBackend(root=tmp_path / "a").prefork is None  # off by default
    b = make_backend(LocalBackendConfig(root=tmp_path / "b", prefork=3))
    assert isinstance(b, LocalBackend) and b.prefork is not None and b.prefork.size == 3
    monkeypatch.setenv("SPARRING_SANDBOX_PREFORK", "2")
    b = LocalBackend(root=tmp_path / "c")
    assert b.prefork is not None and b.prefork.size == 2
    monkeypatch.setenv("SPARRING_SANDBOX_PREFORK", "lots")
    with pytest.raises(SandboxError, match="SPARRING_SANDBOX_PREFORK"):
        LocalBackend(root=tmp_path / "d")
    with pytest.raises((ConfigError, ValueError)):
        LocalBackendConfig(prefork=-1)


def test_an_allowlist_sandbox_is_always_made_cold(pf_backend):
    spec = SandboxSpec(network="allowlist", allow_hosts=("example.invalid",))

    async def main():
        assert await pf_backend.prefork.fill(spec) == 0
        sb = await pf_backend.create(spec)
        await sb.close()
        return pf_backend.prefork.hits, pf_backend.prefork.idle()

    assert asyncio.run(main()) == (0, [])


def test_a_prestarted_sandbox_that_died_while_waiting_is_never_handed_out(pf_backend):
    spec = SandboxSpec(memory_mb=128)

    async def main():
        await pf_backend.prefork.fill(spec)
        (dead,) = pf_backend.prefork.idle()
        os.kill(dead.channel.proc.pid, signal.SIGKILL)  # its bubblewrap, from outside (an OOM, an operator)
        assert wait_until(lambda: dead.channel.proc.poll() is not None)  # positive control: it is dead
        sb = await pf_backend.create(spec)
        try:
            assert sb.id != dead.id and pf_backend.prefork.hits == 0 and pf_backend.prefork.misses == 1
            assert (await sb.exec("echo ok")).stdout == "ok\n"
        finally:
            await sb.close()
        assert not dead.dir.exists()  # closed, not leaked

    asyncio.run(main())


def test_a_refill_after_a_hand_out_waits_for_the_handed_out_sandboxs_first_command(pf_backend):
    """Starting a sandbox is ~10 ms of kernel and CPU work: a refill begun the moment a sandbox is handed
    out ran beside that sandbox's first command. It starts HANDOFF_S later, and still refills."""
    from sparring.sandbox.local import prefork

    spec = SandboxSpec(memory_mb=128)
    started: list[float] = []
    real_cold = pf_backend._cold

    async def cold(*a, **k):
        started.append(asyncio.get_running_loop().time())
        return await real_cold(*a, **k)

    async def main():
        await pf_backend.prefork.fill(spec)
        size = len(pf_backend.prefork.idle())
        pf_backend._cold = cold
        try:
            t0 = asyncio.get_running_loop().time()
            sb = await pf_backend.create(spec)  # a hand-out (a hit: not made cold)
            out = (await sb.exec("echo first")).stdout
            await pf_backend.prefork.fill(spec)  # waits for the refill under way
            await sb.close()
            return size, t0, out, len(pf_backend.prefork.idle()), pf_backend.prefork.hits
        finally:
            pf_backend._cold = real_cold

    size, t0, out, refilled, hits = asyncio.run(main())
    assert out == "first\n" and hits == 1 and refilled == size >= 1
    assert len(started) == 1 and started[0] - t0 >= prefork.HANDOFF_S  # one refill, begun after the hand-off
