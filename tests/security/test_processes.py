"""Host processes are invisible and untouchable; nothing of a sandbox outlives its timeout or close()."""

from __future__ import annotations

import os
import time
import uuid

from sec_support import in_sandbox, run, unique_sleep_arg

from sparring.sandbox.base import SandboxSpec
from tests_support import HANG_S, await_until, procs_with

ATTACK_HOST_PROCESS = r"""
import ctypes, errno, os, sys
pid, marker = int(sys.argv[1]), sys.argv[2][::-1]  # reversed on the command line: not in our own argv
assert pid > 1  # never signal init, a group or -1
out = {"proc_entry": os.path.exists(f"/proc/{pid}")}
for sig in (0, 15, 9):
    try:
        os.kill(pid, sig)
        out[f"kill{sig}"] = "ok"
    except OSError as e:
        out[f"kill{sig}"] = errno.errorcode[e.errno]
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
for name, req in (("attach", PTRACE_ATTACH), ("seize", PTRACE_SEIZE)):
    rc = libc.ptrace(ctypes.c_long(req), ctypes.c_long(pid), None, None)
    out[name] = "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()]
for what in ("mem", "environ", "cmdline"):
    try:
        open(f"/proc/{pid}/{what}", "rb").read(64)
        out[what] = "ok"
    except OSError as e:
        out[what] = errno.errorcode[e.errno]
seen = []
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            if marker.encode() in open(f"/proc/{d}/cmdline", "rb").read():
                seen.append(d)
        except OSError:
            pass
out["marker_seen"] = seen
out["visible_pids"] = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
print(out)
"""


def test_host_process_cannot_be_seen_killed_or_traced(backend, host_sleeper):
    proc, marker = host_sleeper

    async def body(sb):
        return await sb.exec(["python3", "-c", ATTACK_HOST_PROCESS, str(proc.pid), marker[::-1]], timeout=20)

    r = in_sandbox(backend, SandboxSpec(), body)
    assert r.exit_code == 0, r.stderr
    out = eval(r.stdout)  # a dict literal printed by the payload
    time.sleep(0.05)
    assert proc.poll() is None, "the host process was killed from inside the sandbox"
    assert out["marker_seen"] == []
    assert out["proc_entry"] is False
    assert {out["kill0"], out["kill15"], out["kill9"]} == {"ESRCH"}
    assert out["attach"] in ("ESRCH", "EPERM") and out["seize"] in ("ESRCH", "EPERM")
    assert {out["mem"], out["environ"], out["cmdline"]} == {"ENOENT"}
    assert os.getpid() not in out["visible_pids"] or len(out["visible_pids"]) <= 5
    assert len(out["visible_pids"]) <= 5, out["visible_pids"]  # only the sandbox's own few processes


def test_timeout_cannot_be_escaped_with_setsid_nohup_or_double_fork(backend):
    m = unique_sleep_arg()
    payload = f"""
setsid sleep {m} >/dev/null 2>&1 &
nohup sleep {m} >/dev/null 2>&1 &
( trap '' HUP TERM INT; exec sleep {m} ) >/dev/null 2>&1 &
python3 -c 'import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", sys.argv[1]])
    os._exit(0)
os.wait()' {m} >/dev/null 2>&1
sleep {m}
"""

    async def body(sb):
        r = await sb.exec(payload, timeout=1.5)
        alive_after_exec = await gone_within(m, HANG_S)  # polls: returns as soon as they are gone
        await sb.close()
        return r, alive_after_exec, await gone_within(m, HANG_S)

    r, after_exec, after_close = in_sandbox(backend, SandboxSpec(), body)
    assert r.timed_out and r.exit_code == 124
    assert after_exec == [], f"processes escaped the timeout: {after_exec}"
    assert after_close == []
    # (that they are gone the moment exec returns is test_isolation_gaps.py's stricter check)


async def gone_within(marker: str, seconds: float) -> list[int]:
    """Host pids still carrying ``marker`` after waiting up to ``seconds`` for them to die."""
    import asyncio

    deadline = time.monotonic() + seconds
    while (left := procs_with(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return left


def test_nothing_is_left_behind_after_close(backend):
    m = unique_sleep_arg()
    payload = (
        f"setsid nohup sleep {m} >/dev/null 2>&1 < /dev/null & "
        f"( trap '' HUP TERM; sleep {m} ) >/dev/null 2>&1 < /dev/null & "
        f'python3 -c \'import os, sys, time\nif os.fork() == 0:\n os.setsid()\n os.execvp("sleep", ["sleep", sys.argv[1]])\' '
        f"{m} >/dev/null 2>&1 < /dev/null; echo started"
    )

    async def body(sb):
        r = await sb.exec(payload, timeout=10)
        sb_dir = getattr(sb, "dir", None)
        await sb.close()
        return r, sb_dir

    r, sb_dir = in_sandbox(backend, SandboxSpec(memory_mb=256, pids=64), body)
    assert r.stdout == "started\n" and not r.timed_out
    assert procs_with(m) == []
    if sb_dir is not None:
        assert not os.path.exists(sb_dir)


def test_fork_bomb_is_stopped_by_the_pids_limit(backend):
    # At most 200 forks; every child stays until the parent kills it (its own children, by pid), so the
    # count is of children alive at once however slowly a loaded host runs the loop, and even without a
    # limit this ends.
    bomb = """
import os, signal, time
failed = 0
kids = []
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(len(kids), failed)
"""

    async def body(sb):
        bomb_r = await sb.exec(["python3", "-c", bomb], timeout=HANG_S)
        after = await sb.exec("echo alive")  # the sandbox is usable again afterwards
        return bomb_r, after

    r, after = in_sandbox(backend, SandboxSpec(pids=32), body)
    ok, failed = map(int, r.stdout.split())
    assert ok < 32 and failed > 0 and ok + failed == 200
    assert after.stdout == "alive\n"
    assert run(_host_can_spawn())


async def _host_can_spawn() -> bool:
    import asyncio

    p = await asyncio.create_subprocess_exec("true")
    return await p.wait() == 0


def test_sandboxes_cannot_see_each_other(backend):
    m = f"sparring-neighbour-{uuid.uuid4().hex}"

    async def body(sb):
        other = await backend.create(SandboxSpec())
        try:
            import asyncio

            long = asyncio.ensure_future(
                other.exec(["python3", "-c", "import time; time.sleep(600)", m], timeout=900)
            )
            seen = await await_until(lambda: procs_with(m))  # the neighbour is running...
            look = await sb.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo"])
            neighbour_alive = bool(seen) and procs_with(m) == seen  # ...all the while we looked
            long.cancel()
            return look, neighbour_alive
        finally:
            await other.close()

    r, neighbour_alive = in_sandbox(backend, SandboxSpec(), body)
    assert neighbour_alive  # the neighbour was running while we looked
    assert procs_with(m) == []
    assert m not in r.stdout and "python3" not in r.stdout
