"""PID 1 of a sandbox is not the agent's to bend, and nothing of one user survives into the next.

The exec server is PID 1 of its sandbox and runs with the agent's uid, so without a filter the kernel
lets any process of the sandbox change PID 1's limits, priority, scheduling, I/O priority and
affinity. These tests attack it from inside (denied), bend it from the host (a way in nobody thought
of: the sandbox is retired at the next reset), leave processes that survive a naive kill (gone after
reset, without help from PID 1), and check that every command starts from PID 1's birth state.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import subprocess
import textwrap
import uuid

import pytest
from sec_support import BEND, BEND_SELF, FIX_AND_CHECK, SABOTAGE, STATE, in_sandbox, run
from sec_support import syscall_numbers as _nr

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.environment import host_usr_binds
from sparring.sandbox.isolation import seccomp, sweep
from sparring.sandbox.isolation.init_state import InitState
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.pool import SandboxPool
from tests_support import HANG_S, await_until, wait_until

ROOT = os.geteuid() == 0
IOPRIO_CLASS_IDLE = 3 << 13


@pytest.fixture(scope="module", params=["c", "python"])
def any_server(request, tmp_path_factory):
    """A backend per exec server: the C one (the default) and the Python fallback."""
    if request.param == "c":
        b = LocalBackend(root=tmp_path_factory.mktemp("sb-c"))
        if b.server_kind != "c":
            pytest.skip("no C compiler here: the Python server is the only one")
        return b
    return LocalBackend(root=tmp_path_factory.mktemp("sb-py"), server="python")


def test_a_command_cannot_bend_pid1_and_can_bend_itself(any_server):
    async def body(sb):
        attack = await sb.exec(["python3", "-c", BEND, "1", _nr()], timeout=30)
        own = await sb.exec(["python3", "-c", BEND, "0", _nr()], timeout=30)
        shell = await sb.exec(
            "ulimit -n 64 && ulimit -n && nice -n 5 nice && ionice -c 3 true && echo ok", timeout=30
        )
        return attack, own, shell, sb.born, InitState.read(sb.members.server)

    attack, own, shell, born, after = in_sandbox(any_server, SandboxSpec(), body)
    assert attack.exit_code == 0 and own.exit_code == 0, (attack.stderr, own.stderr)
    denied, allowed = json.loads(attack.stdout), json.loads(own.stdout)
    assert denied == dict.fromkeys(denied, "EPERM"), denied
    # control: the very same calls on the caller itself work (ulimit, nice, ionice, taskset keep working)
    assert allowed == dict.fromkeys(allowed, "ok"), allowed
    assert shell.stdout == f"64\n{born.nice + 5}\nok\n", shell.stderr
    assert born == after  # PID 1, read from the host, is as it was born


def test_the_same_calls_bend_pid1_without_the_filter():
    """Positive control: under a bare bubblewrap without the filter, a process bends its PID 1 (same uid)."""
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--as-pid-1", "--cap-drop", "ALL",
            "--uid", "1000", "--gid", "1000", *host_usr_binds(), "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp", "/bin/sh", "-c", 'python3 -c "$0" 1 "$1"; true', BEND, _nr()]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    bent = json.loads(r.stdout)
    assert {
        k: bent[k] for k in ("prlimit_cpu", "renice", "sched_idle", "ioprio_idle", "prlimit_nofile")
    } == dict.fromkeys(("prlimit_cpu", "renice", "sched_idle", "ioprio_idle", "prlimit_nofile"), "ok"), bent


# Runs inside, returns at once: processes that a naive kill misses (a double fork into a new session, a
# stopped one, one ignoring every catchable signal, a fork loop), and a planter that keeps writing files
# into /workspace and /tmp. All bounded: 60 s, 3000 forks.
SURVIVORS = textwrap.dedent(
    r"""
    import os, signal, sys, time
    def daemon(fn):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                try:
                    fn()
                finally:
                    os._exit(0)
            os._exit(0)
        os.wait()
    def planter():
        end, i = time.time() + 60, 0
        while time.time() < end:
            for d in ("/workspace", "/tmp"):
                try:
                    with open("%s/planted-%d" % (d, i % 3), "w") as f:
                        f.write("x")
                except OSError:
                    pass
            i += 1
            time.sleep(0.003)
    def stopped():
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)
    def deaf():
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1):
            signal.signal(s, signal.SIG_IGN)
        time.sleep(60)
    def forker():
        end, n = time.time() + 60, 0
        while time.time() < end and n < 3000:
            if os.fork() == 0:
                time.sleep(0.05)
                os._exit(0)
            n += 1
            while True:
                try:
                    if os.waitpid(-1, os.WNOHANG)[0] == 0:
                        break
                except ChildProcessError:
                    break
            time.sleep(0.005)
    for fn in (planter, stopped, deaf, forker):
        daemon(fn)
    print("spawned")
    """
)
LISTING = (
    "ls /workspace /tmp | grep -c planted; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"
)


def _marked(out: str, marker: str) -> list[str]:
    return [ln for ln in out.splitlines() if marker in ln and "for p in" not in ln]


def test_processes_that_survive_a_naive_kill_are_gone_after_reset(backend):
    marker = f"survivor-{uuid.uuid4().hex[:12]}"

    async def body(sb):
        spawned = await sb.exec(["python3", "-c", SURVIVORS, marker], timeout=30)
        m = sb.members
        # positive control: four daemons and the forker's children run, and the planter plants
        alive = await await_until(lambda: len(sweep.leftovers(m)) >= 4, timeout_s=HANG_S)
        planted = await await_until(lambda: (sb.merged / "planted-0").exists(), timeout_s=HANG_S)
        before = await sb.exec(LISTING, timeout=30)
        await sb.reset()
        left = sweep.leftovers(m)
        # the planter had every chance to land a file in the next episode: wait, then look
        await sb.exec("sleep 0.3", timeout=30)
        after = await sb.exec(LISTING, timeout=30)
        return spawned, alive, planted, before, left, after

    spawned, alive, planted, before, left, after = in_sandbox(backend, SandboxSpec(pids=256), body)
    assert spawned.stdout == "spawned\n", spawned.stderr
    assert alive and planted and len(_marked(before.stdout, marker)) >= 4, before.stdout
    assert left == []  # the host's view: nothing but bubblewrap and PID 1
    assert _marked(after.stdout, marker) == [], after.stdout
    assert after.stdout.splitlines()[0] == "0", after.stdout  # no planted file in /workspace or /tmp


@pytest.mark.skipif(not ROOT, reason="bends PID 1 from the host as root")
def test_reset_kills_survivors_even_when_pid1_cannot_walk_its_proc(backend):
    """The red team's first move, done from the host: PID 1's open-file limit at 0 (its own KILLALL then
    finds nothing). The host's kill still ends every survivor, and the bent PID 1 retires the sandbox."""
    marker = f"survivor-{uuid.uuid4().hex[:12]}"

    async def body(sb):
        await sb.exec(["python3", "-c", SURVIVORS, marker], timeout=30)
        m = sb.members
        alive = await await_until(lambda: len(sweep.leftovers(m)) >= 4, timeout_s=HANG_S)
        resource.prlimit(m.server, resource.RLIMIT_NOFILE, (0, 0))
        try:
            await sb.reset()
            raised = ""
        except SandboxError as e:
            raised = str(e)
        return alive, raised, sb.healthy, m

    alive, raised, healthy, m = in_sandbox(backend, SandboxSpec(pids=256), body)
    assert alive
    assert "retired" in raised and "rlimits" in raised, raised
    assert not healthy
    assert wait_until(lambda: sweep.pidns_members(m.pid_ns) == [])  # the sandbox is gone, survivors included


def _tamper(item: str, pid: int, cg_dirs: dict, made: list) -> None:
    """Change one item of host process ``pid``'s state, as root or as its own user (a cgroup made for
    it goes to ``made``, removed once the sandbox is closed)."""
    if item == "rlimits":
        soft, hard = resource.prlimit(pid, resource.RLIMIT_CPU)
        resource.prlimit(pid, resource.RLIMIT_CPU, (100, hard))
    elif item == "nice":
        os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid) + 1)
    elif item == "policy":  # SCHED_BATCH: a command may leave it for SCHED_OTHER again (not SCHED_IDLE)
        os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
    elif item == "ioprio":
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(seccomp.host_arch().syscalls["ioprio_set"], 1, pid, IOPRIO_CLASS_IDLE) == 0
    elif item == "affinity":
        os.sched_setaffinity(pid, {min(os.sched_getaffinity(pid))})
    elif item == "cgroups":
        d = next(iter(cg_dirs.values()))
        moved = d.parent / f"{d.name}-moved"
        moved.mkdir()
        made.append(moved)
        (moved / "cgroup.procs").write_text(str(pid))
    elif item == "oom_score_adj":
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("500")
    else:
        raise AssertionError(item)


def _rmdir(d) -> bool:
    try:
        d.rmdir()
    except OSError:
        return False
    return True


ITEMS = ("rlimits", "nice", "policy", "ioprio", "affinity", "cgroups", "oom_score_adj")


@pytest.mark.parametrize("item", ITEMS)
def test_pid1_state_is_checked_after_every_reset(backend, item):
    """Each item of PID 1's state: fresh after an ordinary reset; bent (from the host), the sandbox retires."""
    if item in ("cgroups", "oom_score_adj") and not ROOT:
        pytest.skip(f"{item}: only root can change it from the host")
    if item == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no other affinity to set")

    made: list = []

    async def body(sb):
        server = sb.members.server
        await sb.exec(["python3", "-c", BEND, "1", _nr()], timeout=30)  # the in-sandbox attempt first
        await sb.reset()
        fresh = InitState.read(server)
        _tamper(item, server, sb.cg.dirs, made)
        bent = InitState.read(server)
        try:
            await sb.reset()
            raised = ""
        except SandboxError as e:
            raised = str(e)
        return sb.born, fresh, bent, raised, sb.healthy

    try:
        born, fresh, bent, raised, healthy = in_sandbox(backend, SandboxSpec(), body)
    finally:
        for d in made:  # its one member was the sandbox's PID 1: removable once that has exited
            assert wait_until(lambda d=d: _rmdir(d)), f"{d} stayed busy"
    assert fresh == born  # an ordinary reset leaves PID 1 as it was born
    assert getattr(bent, item) != getattr(born, item)  # control: the tampering took
    assert "retired" in raised and item in raised, raised
    assert not healthy


@pytest.mark.parametrize("item", ("rlimits", "policy", "ioprio", "affinity"))
def test_commands_start_from_pid1s_birth_state_not_its_current_one(any_server, item):
    if item == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no other affinity to set")

    async def body(sb):
        first = await sb.exec(["python3", "-c", STATE, _nr()], timeout=30)
        _tamper(item, sb.members.server, sb.cg.dirs, [])
        bent = InitState.read(sb.members.server)
        second = await sb.exec(["python3", "-c", STATE, _nr()], timeout=30)
        return sb.born, bent, first, second

    born, bent, first, second = in_sandbox(any_server, SandboxSpec(), body)
    assert getattr(bent, item) != getattr(born, item)  # control: PID 1 is bent
    assert first.exit_code == 0 and second.exit_code == 0, (first.stderr, second.stderr)
    assert json.loads(second.stdout) == json.loads(first.stdout)


def test_a_command_fails_closed_when_pid1s_state_cannot_be_undone(any_server):
    """A nice value raised on PID 1 cannot be lowered again without privilege: the command does not run."""

    async def body(sb):
        os.setpriority(
            os.PRIO_PROCESS, sb.members.server, os.getpriority(os.PRIO_PROCESS, sb.members.server) + 3
        )
        return await sb.exec("echo ran", timeout=30)

    r = in_sandbox(any_server, SandboxSpec(), body)
    assert r.exit_code == 126 and "ran" not in r.stdout, (r.stdout, r.stderr)
    assert "nice" in r.stderr, r.stderr


def test_nothing_of_one_pooled_episode_reaches_the_next(backend):
    spec = SandboxSpec(pids=128)
    marker = f"sibling-{uuid.uuid4().hex[:12]}"

    async def body():
        fresh_sb = await backend.create(spec)
        try:
            fresh_state = await fresh_sb.exec(["python3", "-c", STATE, _nr()], timeout=30)
        finally:
            await fresh_sb.close()
        pool = SandboxPool(backend, max_idle=1)
        try:
            a = await pool.acquire_spec(spec)
            sab = await a.exec(["python3", "-c", SABOTAGE, marker], timeout=30)
            bent_state = await a.exec(["python3", "-c", BEND_SELF + STATE, _nr()], timeout=30)
            reverted = await a.exec(FIX_AND_CHECK, timeout=30)  # control: the reverter works
            await pool.release(a)
            b = await pool.acquire_spec(spec)
            kept = await b.exec(FIX_AND_CHECK, timeout=30)
            state = await b.exec(["python3", "-c", STATE, _nr()], timeout=30)
            procs = await b.exec(LISTING, timeout=30)
            await pool.release(b)
            return a.id, b.id, sab, bent_state, reverted, kept, fresh_state, state, procs
        finally:
            await pool.close()

    a, b, sab, bent_state, reverted, kept, fresh_state, state, procs = run(body())
    # as root the same sandbox, reset and handed on (copy mode's pool replaces it: reset is not complete)
    assert (a == b) == (backend.mode == "overlay")
    assert sab.stdout == "sabotaging\n", sab.stderr
    assert reverted.stdout == "broken"  # positive control: in episode A the fix is undone
    assert json.loads(bent_state.stdout) != json.loads(fresh_state.stdout)  # and A's own state was bent
    assert kept.stdout == "fixed\n"  # episode B's fix stays
    assert json.loads(state.stdout) == json.loads(
        fresh_state.stdout
    )  # limits and scheduling: a new sandbox's
    assert _marked(procs.stdout, marker) == [], procs.stdout
