"""The OCI backend with real podman and runc, the local busybox image, real overlays and cgroups.

Without podman/runc/busybox-static (``make setup`` installs them as root) every
test here fails with the backend's one-line message saying what to install.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec, WorkspaceDiff
from sparring.sandbox.isolation.features import podman_argv
from sparring.sandbox.oci.backend import CG_PREFIX, CGROUP_ROOT, OCIBackend, OCISandbox
from sparring.sandbox.oci.cycle import podman_cycle_ms
from sparring.sandbox.oci.support import SERVER_ARGV
from tests_support import HANG_S, await_until


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def oci(tmp_path_factory) -> OCIBackend:
    return OCIBackend(root=tmp_path_factory.mktemp("oci-root"))


@pytest.fixture()
def ws(tmp_path) -> Path:
    d = tmp_path / "task"
    (d / "pkg").mkdir(parents=True)
    (d / "a.txt").write_text("orig\n")
    (d / "pkg" / "m.py").write_text("X = 1\n")
    return d


def _pids_in_use(sb: OCISandbox) -> int:
    """Processes counted against the sandbox's pids limit (its server and every exec)."""
    assert sb._pids_parent is not None
    return int((sb._pids_parent / "pids.current").read_text())


async def _with(backend: OCIBackend, spec: SandboxSpec, fn, **kw):
    sb = await backend.create(spec, **kw)
    try:
        return await fn(sb)
    finally:
        await sb.close()


def _container_exists(cid: str) -> bool:
    return subprocess.run(podman_argv() + ["container", "exists", cid], capture_output=True).returncode == 0


def _leftovers(sb: OCISandbox) -> list[str]:
    out = []
    if sb.dir.exists():
        out.append(f"dir {sb.dir}")
    if str(sb.dir) in Path("/proc/self/mountinfo").read_text():
        out.append("mount")
    if sb.cid and _container_exists(sb.cid):
        out.append(f"container {sb.cid}")
    out += [f"cgroup {p}" for p in CGROUP_ROOT.glob(f"*/{CG_PREFIX}{sb.id}")]
    return out


def test_exec_results_env_cwd_stdin_and_confinement(oci, ws, tmp_path):
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "key.txt").write_text("k")
    (tmp_path / "reports").mkdir()

    async def body(sb):
        r = await sb.exec("cat a.txt; pwd; echo oops >&2; exit 3")
        assert (r.exit_code, r.stdout, r.stderr) == (3, "orig\n/workspace\n", "oops\n")
        r = await sb.exec(
            ["sh", "-c", 'echo "$FOO $BAR $PYTHONHASHSEED ${container:-unset}"'], env={"BAR": "b"}
        )
        assert r.stdout == "a b 7 unset\n"  # spec env + call env, podman's own variables cleared
        r = await sb.exec("pwd; ls", cwd="/workspace/pkg")
        assert r.stdout == "/workspace/pkg\nm.py\n"
        r = await sb.exec(["cat"], stdin=b"in\x00put")
        assert r.stdout == "in\x00put"
        r = await sb.exec(["no-such-tool", "x"])
        assert r.exit_code == 127 and "no-such-tool" in r.stderr
        with pytest.raises(SandboxError, match="cannot chdir"):
            await sb.exec("true", cwd="/nope")
        # concurrent calls on one sandbox each get their own output
        rs = await asyncio.gather(*(sb.exec(f"sleep 0.1; echo {i}") for i in range(6)))
        assert [x.stdout for x in rs] == [f"{i}\n" for i in range(6)]
        r = await sb.exec("head -c 3000000 /dev/zero | tr '\\0' x")
        assert r.truncated and "output truncated" in r.stdout and len(r.stdout) < 1_100_000
        # confinement: read-only root, no capabilities, no network but loopback, fixed hostname
        r = await sb.exec("touch /bin/evil; grep CapEff /proc/self/status; hostname; cat /proc/net/dev")
        assert "Read-only file system" in r.stderr
        assert "CapEff:\t0000000000000000" in r.stdout and "sandbox\n" in r.stdout
        ifaces = {ln.split(":")[0].strip() for ln in r.stdout.splitlines() if ":" in ln and "|" not in ln}
        assert ifaces - {"CapEff"} == {"lo"}
        # extra mounts: judge assets read-only, reports writable
        r = await sb.exec("cat /assets/key.txt; echo no > /assets/x; echo rep > /reports/r.txt")
        assert r.stdout == "k" and "Read-only file system" in r.stderr
        assert await sb.read_file("/assets/key.txt") == b"k"

    spec = SandboxSpec(
        workspace=ws,
        env={"FOO": "a"},
        seed=7,
        extra_ro={"/assets": tmp_path / "assets"},
        extra_rw={"/reports": tmp_path / "reports"},
    )
    run(_with(oci, spec, body))
    assert (tmp_path / "reports" / "r.txt").read_text() == "rep\n"
    assert sorted(p.name for p in (tmp_path / "assets").iterdir()) == ["key.txt"]


def test_timeout_kills_everything_the_command_started(oci):
    async def body(sb):
        r = await sb.exec("sleep 301 >/dev/null 2>&1 &")  # a service started by one call...
        assert r.exit_code == 0 and not r.timed_out  # ...returns at once, not after the service
        escape = "setsid sh -c 'sleep 302' >/dev/null 2>&1 & (sleep 303 >/dev/null 2>&1 &); echo started; sleep 304"
        # sleep 304 never ends, so the timeout fires; 5 s (not 1) so a loaded host reaches "echo started" first
        r = await sb.exec(escape, timeout=5.0)
        assert (r.exit_code, r.timed_out, r.stdout) == (124, True, "started\n")
        ps = (await sb.exec("ps -o args")).stdout
        assert "sleep 301" in ps  # ...outlives other calls
        assert not any(f"sleep {n}" in ps for n in (302, 303, 304)), ps
        with pytest.raises(TimeoutError):  # a caller that gives up also ends the command
            await asyncio.wait_for(sb.exec("sleep 307"), 0.5)
        assert "sleep 307" not in (await sb.exec("ps -o args")).stdout

    run(_with(oci, SandboxSpec(), body))


def test_commands_cannot_leave_their_exec_cgroup_nor_redirect_host_writes(oci, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")

    async def body(sb):
        r = await sb.exec("echo $$ > /.sparring-cg/cgroup.procs; mkdir /.sparring-cg/evil")
        assert r.exit_code != 0 and r.stderr.count("Permission denied") == 2, r.stderr
        # a nested cgroup of its own does not hide a process from the timeout
        nest = (
            "c=$(sed -n 's,.*:pids:.*/exec/,,p' /proc/self/cgroup); mkdir /.sparring-cg/$c/sub && "
            'sh -c "echo \\$\\$ > /.sparring-cg/$c/sub/cgroup.procs && exec sleep 305" & sleep 306'
        )
        r = await sb.exec(nest, timeout=1.0)
        assert r.timed_out and "sleep 305" not in (await sb.exec("ps -o args")).stdout
        # no symlink can be planted under the names of coming execs (x/ is nobody's), nor the server's
        # script or request FIFO written; and the host would not follow one anyway (checked below)
        plant = f"for i in $(seq 1 40); do for s in sh in out ev; do ln -sf {victim} /.sparring/x/$i.$s; done; done"
        r = await sb.exec(
            plant + "; echo 9 > /.sparring/req; echo x >> /.sparring/server.sh; mv /.sparring/x /.sparring/y"
        )
        assert r.exit_code != 0 and r.stderr.count("Permission denied") >= 3, r.stderr
        assert not list(sb.ctl.glob("x/*")) and sorted(p.name for p in sb.ctl.iterdir()) == [
            "req",
            "server.sh",
            "x",
        ]
        os.symlink(
            victim, sb.ctl / "x" / f"{next(sb._seq) + 1}.sh"
        )  # planted by the host: still not followed
        for _ in range(3):
            r = await sb.exec(["cat"], stdin=b"data")
            assert (r.exit_code, r.stdout) == (0, "data")

    run(_with(oci, SandboxSpec(), body))
    assert victim.read_text() == "precious\n"


def test_files_reset_snapshot_restore_diff(oci, ws):
    async def body(sb):
        await sb.write_file("new/b.txt", b"B")
        assert (await sb.exec("cat /workspace/new/b.txt")).stdout == "B"
        r = await sb.exec("echo changed > a.txt; rm pkg/m.py; echo c > c.txt")
        assert r.exit_code == 0
        assert await sb.read_file("/workspace/a.txt") == b"changed\n"
        assert await sb.list_dir() == ["a.txt", "c.txt", "new/", "pkg/"]
        await sb.delete_file("c.txt")
        d = await sb.diff()
        assert d == WorkspaceDiff(files={"a.txt": b"changed\n", "new/b.txt": b"B"}, deleted=("pkg/m.py",))
        with pytest.raises(SandboxError, match="climbs out"):
            await sb.read_file("../../etc/passwd")
        snap = await sb.snapshot()
        await sb.write_file("after.txt", b"later")
        await sb.restore(snap)
        r = await sb.exec("cat a.txt; ls")
        assert r.stdout == "changed\na.txt\nnew\npkg\n"  # the container sees the restored layer
        await sb.reset()
        r = await sb.exec("cat a.txt; ls pkg")
        assert r.stdout == "orig\nm.py\n" and (await sb.diff()).is_empty()
        return snap

    snap = run(_with(oci, SandboxSpec(workspace=ws), body))
    assert (ws / "a.txt").read_text() == "orig\n" and not (ws / "new").exists()

    async def seeded(sb):
        return (await sb.exec("cat a.txt new/b.txt")).stdout

    assert run(_with(oci, SandboxSpec(workspace=ws), seeded, snapshot=snap)) == "changed\nB"


def test_the_workspace_alias_is_the_same_live_workspace(oci, ws):
    """spec.workspace_alias (a task's [environment] workspace, /testbed in SWE images): the one overlay at
    both paths; edits through either are seen through the other and in the diff; restore and reset cover
    both. The control: without it the image has no /testbed at all."""

    async def body(sb):
        out = [(await sb.exec("pwd; echo agent > /workspace/a.txt; echo t > /testbed/t.txt")).stdout]
        out.append((await sb.exec("cat /testbed/a.txt /workspace/t.txt", cwd="/tmp")).stdout)
        out.append(sorted((await sb.diff()).files))
        snap = await sb.snapshot()
        await sb.exec("echo later > /testbed/a.txt")
        await sb.restore(snap)
        out.append((await sb.exec("cat /testbed/a.txt /workspace/a.txt")).stdout)
        await sb.reset()
        out.append((await sb.exec("cat /testbed/a.txt /workspace/a.txt; ls /testbed; ls /workspace")).stdout)
        return out

    pwd, edited, diff, restored, reset = run(
        _with(oci, SandboxSpec(workspace=ws, workspace_alias="/testbed"), body)
    )
    assert pwd == "/workspace\n" and edited == "agent\nt\n" and diff == ["a.txt", "t.txt"]
    assert restored == "agent\nagent\n"
    assert reset == "orig\norig\na.txt\npkg\na.txt\npkg\n"

    async def control(sb):
        return (await sb.exec("echo agent > /workspace/a.txt; cat /testbed/a.txt")).exit_code

    assert run(_with(oci, SandboxSpec(workspace=ws), control)) != 0


def test_close_leaves_nothing_and_closed_sandbox_refuses(oci, ws):
    async def body():
        sb = await oci.create(SandboxSpec(workspace=ws, memory_mb=64, pids=32))
        r = await sb.exec("sleep 300 >/dev/null 2>&1 & echo ok")
        assert r.stdout == "ok\n" and sb.dir.exists() and _container_exists(sb.cid)
        await sb.close()
        await sb.close()  # idempotent
        with pytest.raises(SandboxError, match="closed"):
            await sb.exec("true")
        return sb

    sb = run(body())
    assert _leftovers(sb) == []


def test_killed_exec_server_is_a_clear_error_for_that_sandbox_only(oci):
    async def body():
        victim, other = await oci.create(SandboxSpec()), await oci.create(SandboxSpec())
        try:
            assert (await victim.exec("true")).exit_code == 0  # the server is up
            server = [victim.server_pid]  # found by the backend at create (its only process then)
            assert Path(f"/proc/{server[0]}/cmdline").read_bytes().startswith(SERVER_ARGV)
            os.kill(server[0], signal.SIGKILL)
            with pytest.raises(SandboxError, match="is gone"):
                await victim.exec("echo hi", timeout=HANG_S)
            assert (await other.exec("echo hi")).stdout == "hi\n"
        finally:
            await victim.close()
            await other.close()
        return victim

    assert _leftovers(run(body())) == []


def test_bad_input_is_one_line_error_and_leaves_nothing(oci, tmp_path, monkeypatch):
    before = sorted(p.name for p in oci.root.iterdir())
    # The cgroups of the sandboxes this test makes, not every sparring cgroup on the host: other
    # processes (another test run on a shared CI machine) create and remove theirs meanwhile.
    made: list[str] = []
    real_init = OCISandbox.__init__

    def recording_init(self, *a, **kw):
        real_init(self, *a, **kw)
        made.append(self.id)

    monkeypatch.setattr(OCISandbox, "__init__", recording_init)
    with pytest.raises(SandboxError) as e:
        run(oci.create(SandboxSpec(workspace=tmp_path / "missing")))
    assert "is not a directory" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SandboxError) as e:
        run(oci.create(SandboxSpec(), image="localhost/sparring-no-such-image:1"))
    assert "not found locally" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SandboxError, match="unknown snapshot"):
        run(oci.create(SandboxSpec(), snapshot="snap-0-nope"))
    assert sorted(p.name for p in oci.root.iterdir()) == before
    assert made  # the bad image got as far as a sandbox: its cleanup is what is checked
    assert [c for i in made for pat in ("", "*/") for c in CGROUP_ROOT.glob(f"{pat}{CG_PREFIX}{i}")] == []


@pytest.mark.slow
def test_limits_memory_pids_disk_cpu(oci, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # podman's helpers must leave nothing in the caller's directory

    async def body(sb):
        r = await sb.exec("dd if=/dev/zero of=/dev/null bs=200M count=1", timeout=20)
        assert r.oom_killed and r.exit_code != 0
        idle = _pids_in_use(sb)
        r = await sb.exec("for i in $(seq 40); do sleep 1 & done")
        assert r.exit_code != 0 and "can't fork" in r.stderr  # the pids limit stopped the loop
        # the sleeps end when a loaded host gets to them: wait for the cgroup to drain, not a fixed 1.2 s
        assert await await_until(lambda: _pids_in_use(sb) <= idle)
        assert (await sb.exec("echo ok")).stdout == "ok\n"  # and the sandbox recovers
        r = await sb.exec("dd if=/dev/zero of=/workspace/big bs=1M count=8")
        assert r.exit_code != 0 and "No space left" in r.stderr
        quota = (sb._ctrl_dir("cpu") / "cpu.cfs_quota_us").read_text().strip()
        period = (sb._ctrl_dir("cpu") / "cpu.cfs_period_us").read_text().strip()
        assert int(quota) / int(period) == pytest.approx(0.5)

    run(_with(oci, SandboxSpec(memory_mb=48, pids=16, cpus=0.5, disk_mb=4), body))
    assert list(tmp_path.iterdir()) == []


CRASH = """
import asyncio, os, signal, sys
from pathlib import Path
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.oci.backend import OCIBackend

async def main():
    sb = await OCIBackend(image=sys.argv[2], root=Path(sys.argv[1])).create(SandboxSpec(pids=32))
    await sb.exec("sleep 300 >/dev/null 2>&1 &")
    print(sb.id, sb.cid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


@pytest.mark.slow
def test_reaper_removes_sandboxes_of_a_killed_owner(oci, tmp_path):
    root = tmp_path / "crash-root"
    p = subprocess.run(
        [sys.executable, "-c", CRASH, str(root), oci.image], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == -9, p.stderr[-2000:]
    sid, cid = p.stdout.split()
    assert _container_exists(cid) and (root / f"oci-{sid}").is_dir()
    assert OCIBackend(image=oci.image, root=root).reap_stale() == 0  # the constructor already reaped it
    assert not _container_exists(cid) and not (root / f"oci-{sid}").exists()
    assert str(root) not in Path("/proc/self/mountinfo").read_text()
    assert list(CGROUP_ROOT.glob(f"*/{CG_PREFIX}{sid}")) == []


@pytest.mark.slow
def test_podman_cycle_measurement(oci):
    raw = run(podman_cycle_ms(2, image=oci.image))
    assert raw["n"] == 2 and 0 < raw["podman_cycle_ms"] <= raw["podman_cycle_p99_ms"]
    sbx = run(podman_cycle_ms(1, image=oci.image, mode="sandbox"))
    assert sbx["mode"] == "sandbox" and sbx["podman_cycle_ms"] > 0
    with pytest.raises(SandboxError, match="n >= 1"):
        run(podman_cycle_ms(0))
