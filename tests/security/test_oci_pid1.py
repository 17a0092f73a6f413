"""The OCI backend's exec server is not the candidate's to bend, and nothing of one episode reaches the next.

Every process of an OCI sandbox, its exec server included, is (capability-less) uid 0, so without the
backend's seccomp profile (oci/profile.py) a command could change the server's limits, priority,
scheduling, I/O priority and affinity, and every later command would inherit them. These tests attack
the server from inside (denied), show that the same payload bends it under podman's default profile
(the class is real), bend it from the host (the sandbox is retired at the next reset, and a pool
replaces it), and check that a pooled episode starts from the server's birth state.

Needs root, podman, runc and busybox-static (``make setup``), as tests/sandbox/test_oci.py.
"""

from __future__ import annotations

import json
import os
import resource
import uuid
from pathlib import Path

import pytest
from sec_support import BEND, FIX_AND_CHECK, SABOTAGE, STATE, in_sandbox, run, syscall_numbers

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation.init_state import InitState
from sparring.sandbox.oci.backend import OCIBackend, OCISandbox
from sparring.sandbox.oci.profile import default_profile
from sparring.sandbox.pool import SandboxPool
from tests_support import HANG_S, await_until

# The OCI backend is rootful podman (it mounts the workspace layers on the host): as another user there is
# no OCI sandbox to attack, and tests/unprivileged runs tests/security as one.
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the OCI backend needs root")

PAYLOAD_KEYS = ("prlimit_cpu", "renice", "sched_idle", "ioprio_idle", "prlimit_nofile")


@pytest.fixture(scope="module")
def oci(tmp_path_factory) -> OCIBackend:
    return OCIBackend(root=tmp_path_factory.mktemp("oci-pid1"))


def _python_spec(**kw: object) -> SandboxSpec:
    """A spec whose sandbox can run the host's python3 (the busybox image has none): /usr and the
    library directories read-only."""
    ro = {"/usr": Path("/usr")}
    for name in ("/lib", "/lib64"):
        if Path(name).exists():
            ro[name] = Path(name).resolve()
    return SandboxSpec(extra_ro=ro, **kw)  # type: ignore[arg-type]


def _ns_pid(host_pid: int) -> int:
    """``host_pid``'s pid inside its container (the last NSpid field)."""
    for line in Path(f"/proc/{host_pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise AssertionError("no NSpid line")


async def _bend(sb: OCISandbox, target: int):
    r = await sb.exec(["python3", "-c", BEND, str(target), syscall_numbers()], timeout=HANG_S)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_a_command_cannot_bend_the_exec_server_and_can_bend_itself(oci):
    async def body(sb):
        inner = _ns_pid(sb.server_pid)
        attack = await _bend(sb, inner)
        at_init = await _bend(sb, _ns_pid(sb.init_pid))
        own = await _bend(sb, 0)
        after = InitState.read(sb.server_pid)
        await sb.reset()  # nothing changed: the host's check passes
        return inner, attack, at_init, own, sb.born[sb.server_pid], after, sb.healthy

    inner, attack, at_init, own, born, after, healthy = in_sandbox(oci, _python_spec(), body)
    assert inner != 1  # the server runs under podman's init
    assert attack == dict.fromkeys(attack, "EPERM"), attack
    assert at_init == dict.fromkeys(at_init, "EPERM"), at_init
    # control: the very same calls on the caller itself work
    assert own == dict.fromkeys(own, "ok"), own
    assert after == born and healthy


def test_the_same_calls_bend_the_exec_server_under_podmans_default_profile(tmp_path):
    """Positive control: without the backend's rules (podman's own default profile) the payload bends
    the server; the host's check after reset still catches it and retires the sandbox."""
    plain = OCIBackend(root=tmp_path / "plain")
    plain.seccomp_profile = default_profile()

    async def body(sb):
        bent = await _bend(sb, _ns_pid(sb.server_pid))
        now = InitState.read(sb.server_pid)
        try:
            await sb.reset()
            raised = ""
        except SandboxError as e:
            raised = str(e)
        return bent, sb.born[sb.server_pid], now, raised, sb.healthy

    bent, born, now, raised, healthy = in_sandbox(plain, _python_spec(), body)
    assert {k: bent[k] for k in PAYLOAD_KEYS} == dict.fromkeys(PAYLOAD_KEYS, "ok"), bent
    assert now.rlimits != born.rlimits and now.nice != born.nice and now.policy != born.policy
    assert "retired" in raised and "exec server" in raised and "\n" not in raised, raised
    assert not healthy


def _tamper(item: str, pid: int) -> None:
    if item == "rlimits":
        resource.prlimit(pid, resource.RLIMIT_CPU, (100, resource.prlimit(pid, resource.RLIMIT_CPU)[1]))
    elif item == "nice":
        os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid) + 1)
    elif item == "policy":
        os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
    else:
        raise AssertionError(item)


@pytest.mark.parametrize("item", ("rlimits", "nice", "policy"))
def test_a_server_bent_from_the_host_retires_the_sandbox_at_reset(oci, item):
    async def body(sb):
        r = await sb.exec("sleep 300 >/dev/null 2>&1 & echo started")  # left running: reset kills it
        await sb.reset()
        fresh = InitState.read(sb.server_pid)
        _tamper(item, sb.server_pid)
        bent = InitState.read(sb.server_pid)
        try:
            await sb.reset()
            raised = ""
        except SandboxError as e:
            raised = str(e)
        return r.stdout, sb.born[sb.server_pid], fresh, bent, raised, sb.healthy, sb.closed

    out, born, fresh, bent, raised, healthy, closed = in_sandbox(oci, SandboxSpec(), body)
    assert out == "started\n"
    assert fresh == born  # an ordinary reset (with a process to kill) leaves the server as it was born
    assert getattr(bent, item) != getattr(born, item)  # control: the tampering took
    assert "retired" in raised and item in raised, raised
    assert not healthy and closed


def test_a_pooled_episode_starts_from_the_servers_birth_state(oci):
    spec = _python_spec(pids=128)
    marker = f"sibling-{uuid.uuid4().hex[:12]}"

    async def body():
        pool = SandboxPool(oci, max_idle=1)
        try:
            a = await pool.acquire_spec(spec)
            fresh_state = await a.exec(["python3", "-c", STATE, syscall_numbers()], timeout=HANG_S)
            attack = await _bend(a, _ns_pid(a.server_pid))
            sab = await a.exec(["python3", "-c", SABOTAGE, marker], timeout=HANG_S)
            reverted = await a.exec(FIX_AND_CHECK, timeout=HANG_S)  # control: the reverter works
            await pool.release(a)
            b = await pool.acquire_spec(spec)
            members = b._members()
            kept = await b.exec(FIX_AND_CHECK, timeout=HANG_S)
            state = await b.exec(["python3", "-c", STATE, syscall_numbers()], timeout=HANG_S)
            ps = await b.exec(["ps", "-o", "args"], timeout=HANG_S)
            await pool.release(b)
            # bent from the host while idle in the pool: the pool hands out another sandbox
            _tamper("rlimits", b.server_pid)
            c = await pool.acquire_spec(spec)
            replaced = await await_until(lambda: b.closed, timeout_s=HANG_S)
            await pool.release(c)
            return (a, b, c, members, fresh_state, attack, sab, reverted, kept, state, ps, replaced,
                    pool.replaced_unhealthy)  # fmt: skip
        finally:
            await pool.close()

    a, b, c, members, fresh_state, attack, sab, reverted, kept, state, ps, replaced, n_replaced = run(body())
    assert attack == dict.fromkeys(attack, "EPERM"), attack
    assert sab.stdout == "sabotaging\n", sab.stderr
    assert reverted.stdout == "broken"  # positive control: in episode A the fix is undone
    assert a.id == b.id  # the same sandbox, reset and handed on
    assert members == sorted((b.init_pid, b.server_pid))  # nothing of A left, seen from the host
    assert kept.stdout == "fixed\n"  # episode B's fix stays
    assert json.loads(state.stdout) == json.loads(fresh_state.stdout)  # the server's birth state
    assert "python3" not in ps.stdout and ps.stdout.count("\n") > 2, ps.stdout  # and from inside
    assert c.id != b.id and replaced and n_replaced == 1


LEAVE = (
    "echo a > /tmp/a; mkdir -p /var/tmp/d/e; echo r > /run/r; echo s > /dev/shm/s; ln -s /etc /tmp/l; "
    "mkfifo /tmp/f; mkdir /tmp/d; echo x > /tmp/d/x; echo ok"
)
LOOK = "ls -A /tmp /var/tmp /run /dev /dev/shm"


def test_files_left_outside_the_workspace_do_not_reach_the_next_episode(oci):
    async def body(sb):
        before = await sb.exec(LOOK)
        left = await sb.exec(LEAVE)
        during = await sb.exec(LOOK)
        await sb.reset()
        after = await sb.exec(LOOK)
        # what the host cannot put back (a device node replaced by a file every command would read) retires
        replaced = await sb.exec("rm /dev/null && echo planted > /dev/null && echo replaced")
        try:
            await sb.reset()
            raised = ""
        except SandboxError as e:
            raised = str(e)
        return before, left, during, after, replaced, raised

    before, left, during, after, replaced, raised = in_sandbox(oci, SandboxSpec(), body)
    assert left.stdout == "ok\n", left.stderr
    assert during.stdout != before.stdout  # control: the files were there
    assert after.stdout == before.stdout
    assert replaced.stdout == "replaced\n", replaced.stderr
    assert "retired" in raised and "/dev/null changed" in raised, raised


def test_a_server_stopped_from_inside_retires_the_sandbox_at_reset(oci):
    """A command may signal the server (it is PID 2, not the namespace's init, which ignores SIGSTOP):
    stopped, it would hang every command of the next episode; the host's check at reset sees it."""

    async def body(sb):
        r = await sb.exec(f"kill -STOP {_ns_pid(sb.server_pid)}; echo sent")
        stopped = await await_until(
            lambda: Path(f"/proc/{sb.server_pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T",
            timeout_s=HANG_S,
        )
        healthy = sb.healthy
        try:
            await sb.reset()
            raised = ""
        except SandboxError as e:
            raised = str(e)
        return r.stdout, stopped, healthy, raised, sb.closed

    out, stopped, healthy, raised, closed = in_sandbox(oci, SandboxSpec(), body)
    assert out == "sent\n" and stopped  # control: the server really is stopped
    assert not healthy  # a pool would not hand it out
    assert "retired" in raised and "not running (state T)" in raised, raised
    assert closed


def test_the_servers_and_inits_memory_are_not_the_commands(oci):
    """/proc/PID/mem (and maps, environ) of a process of one's own uid is open to it while that process is
    dumpable: the server and the init run execute-only binaries, so they are not (sealed.py)."""

    async def body(sb):
        server, init = _ns_pid(sb.server_pid), _ns_pid(sb.init_pid)
        look = (
            "for p in {}; do head -c 1 /proc/$p/maps >/dev/null 2>&1 && echo open $p || echo denied $p; done"
        )
        # control: a sleeping command of the same uid, whose memory map another command may read
        await sb.exec("sleep 300 >/dev/null 2>&1 &")
        r = await sb.exec(
            "s=$(for p in /proc/[0-9]*; do case $(cat $p/cmdline 2>/dev/null) in sleep300) echo ${p#/proc/};; esac; "
            f"done); {look.format(f'{server} {init} $s')}"
        )
        return server, init, r

    server, init, r = in_sandbox(oci, SandboxSpec(), body)
    lines = r.stdout.splitlines()
    assert lines[:2] == [f"denied {server}", f"denied {init}"], (r.stdout, r.stderr)
    assert len(lines) == 3 and lines[2].startswith("open "), (r.stdout, r.stderr)  # the control


def test_a_server_whose_session_was_reniced_from_inside_retires_at_reset(oci):
    """/proc/PID/autogroup is the owner's to write (uid 0 here): a command lowers the priority of the
    server's whole session; the host's check sees it (InitState.autogroup)."""

    async def body(sb):
        ns = _ns_pid(sb.server_pid)
        r = await sb.exec(f"echo 19 > /proc/{ns}/autogroup && cat /proc/{ns}/autogroup")
        try:
            await sb.reset()
            raised = ""
        except SandboxError as e:
            raised = str(e)
        return r, sb.born[sb.server_pid], raised

    r, born, raised = in_sandbox(oci, SandboxSpec(), body)
    if not born.autogroup:
        pytest.skip("this kernel has no autogroups")
    assert r.stdout.endswith("nice 19\n"), (r.stdout, r.stderr)  # control: the write took
    assert "retired" in raised and "autogroup" in raised, raised
