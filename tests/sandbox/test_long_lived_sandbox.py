"""The long-lived local sandbox: one bubblewrap, an exec server inside, layers swapped under it."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.storage.layers import tree_digest
from tests_support import ROOT_ONLY, await_until, procs_with


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module", params=["c", "python"])
def backend(request):
    """Both exec servers (the compiled one and the interpreter fallback) must behave the same."""
    from sparring.sandbox.local.backend import LocalBackend

    b = LocalBackend(server=request.param)
    assert b.server_kind == request.param
    return b


async def _started(marker: str) -> list[int]:
    """The processes running ``marker`` once one has started. A command that puts it in the background
    returns when the shell exits, which can be before the forked child has exec'd ``marker`` (under load)."""
    return await await_until(lambda: procs_with(marker))


def _marker() -> str:
    return f"sleep {5000 + uuid.uuid4().int % 4000}.{uuid.uuid4().int % 1000}"


async def _with(backend, spec, fn):
    sb = await backend.create(spec)
    try:
        return await fn(sb)
    finally:
        await sb.close()


def test_execs_on_one_sandbox_run_concurrently(backend):
    async def body(sb):
        waiter = asyncio.ensure_future(
            sb.exec("while [ ! -f /tmp/go ]; do sleep 0.01; done; echo released", timeout=60)
        )
        await asyncio.sleep(0.05)
        # Were execs serialised, this one would wait for the waiter, which waits for it: a timeout.
        r = await sb.exec("touch /tmp/go", timeout=60)
        return r, await waiter

    r, w = run(_with(backend, SandboxSpec(), body))
    assert r.exit_code == 0
    assert (w.exit_code, w.stdout, w.timed_out) == (0, "released\n", False)


def test_output_streams_while_the_command_runs(backend):
    async def body(sb):
        seen: list[tuple[str, bytes]] = []
        pending: list[asyncio.Future] = []

        def on_output(stream: str, chunk: bytes) -> None:
            seen.append((stream, chunk))
            if b"first" in chunk and not pending:
                pending.append(asyncio.ensure_future(sb.exec("touch /tmp/go2")))

        r = await sb.exec(
            "echo first; while [ ! -f /tmp/go2 ]; do sleep 0.01; done; echo second >&2",
            timeout=60,
            on_output=on_output,
        )
        await pending[0]
        return r, seen

    r, seen = run(_with(backend, SandboxSpec(), body))
    assert not r.timed_out and r.stdout == "first\n" and r.stderr == "second\n"
    assert seen[0] == ("stdout", b"first\n") and ("stderr", b"second\n") in seen


def test_background_processes_persist_between_calls_and_die_on_close(backend):
    marker = _marker()

    async def body(sb):
        start = await sb.exec(f"{marker} > /dev/null 2>&1 &")
        alive = await _started(marker)
        # anchored: unanchored, the pattern also matches this command's own shell (its argv holds it)
        later = await sb.exec(f"pgrep -f '^{marker}$' >/dev/null && echo running")
        return start, alive, later

    start, alive, later = run(_with(backend, SandboxSpec(), body))
    assert start.exit_code == 0 and len(alive) == 1 and later.stdout == "running\n"
    assert procs_with(marker) == []


def test_a_service_started_in_one_call_answers_the_next(backend):
    async def body(sb):
        await sb.exec(
            'python3 -c \'import http.server as h; h.HTTPServer(("127.0.0.1", 8765), h.SimpleHTTPRequestHandler)'
            ".serve_forever()' > /tmp/server.log 2>&1 &"
        )
        return await sb.exec(
            "for i in $(seq 1000); do python3 -c 'import urllib.request as u; "
            'print(u.urlopen("http://127.0.0.1:8765/").status)\' 2>/dev/null && break; sleep 0.05; done',
            timeout=300,  # polls until the server answers; the bound is only against a hang
        )

    r = run(_with(backend, SandboxSpec(network="loopback"), body))
    assert r.stdout.strip() == "200"


def test_timeout_kills_only_the_timed_out_command_tree(backend):
    keep, escape = _marker(), _marker()

    async def body(sb):
        await sb.exec(f"{keep} > /dev/null 2>&1 &")
        await _started(keep)
        r = await sb.exec(
            f"setsid {escape} > /dev/null 2>&1 & ( ( {escape} > /dev/null 2>&1 & ) & ) ; nohup {escape} "
            "> /dev/null 2>&1 & sleep 30",
            timeout=1,
        )
        return r, procs_with(escape), procs_with(keep)

    r, escaped, kept = run(_with(backend, SandboxSpec(), body))
    assert r.timed_out and r.exit_code == 124
    assert escaped == [] and len(kept) == 1
    assert procs_with(keep) == []


def test_reset_kills_background_processes(backend):
    marker = _marker()

    async def body(sb):
        await sb.exec(f"{marker} > /dev/null 2>&1 &")
        before = await _started(marker)
        await sb.reset()
        return before, procs_with(marker), await sb.exec("echo still usable")

    before, after, r = run(_with(backend, SandboxSpec(), body))
    assert len(before) == 1 and after == [] and r.stdout == "still usable\n"


def test_env_cwd_stdin_and_open_files(backend):
    async def body(sb):
        a = await sb.exec("echo $X; pwd", env={"X": "forty-two"}, cwd="/tmp")
        b = await sb.exec(["wc", "-c"], stdin=b"x" * 3_000_000)
        c = await sb.exec("ulimit -n")
        d = await sb.exec("true", cwd="/no/such/dir")
        return a, b, c, d

    a, b, c, d = run(_with(backend, SandboxSpec(nofile=64), body))
    assert a.stdout == "forty-two\n/tmp\n"
    assert b.stdout.strip() == "3000000"
    assert c.stdout.strip() == "64"
    assert d.exit_code == 126 and "/no/such/dir" in d.stderr


@ROOT_ONLY
def test_tmp_and_home_count_against_the_disk_quota_and_reset(backend):
    async def body(sb):
        fill = await sb.exec("dd if=/dev/zero of=/tmp/big bs=1M count=64 2>&1; echo rc=$?")
        await sb.exec("echo hi > $HOME/note")
        await sb.reset()
        return fill, await sb.exec("ls -A /tmp; echo --; ls -A $HOME")

    fill, after = run(_with(backend, SandboxSpec(disk_mb=8), body))
    assert "No space left on device" in fill.stdout and "rc=1" in fill.stdout
    tmp, home = after.stdout.split("--\n")
    # Empty but for the environment's own read-only binds: a checkout (and its venv) under /tmp shows there.
    assert tmp.split() == _env_entries(backend, "/tmp")
    assert home.split() == _env_entries(backend, "/home/agent")


def _env_entries(backend, parent: str) -> list[str]:
    """Names the sandbox environment's read-only binds put directly under ``parent`` (they survive reset)."""
    return sorted(
        {p.relative_to(parent).parts[0] for p in backend.plan.late_binds if p.is_relative_to(parent)}
    )


@ROOT_ONLY
def test_snapshot_is_a_content_addressed_layer_of_the_change_only(backend, tmp_path):
    ws = tmp_path / "big"
    for i in range(200):
        (ws / f"pkg{i % 10}").mkdir(parents=True, exist_ok=True)
        (ws / f"pkg{i % 10}" / f"m{i}.py").write_text(f"X = {i}\n")

    async def body():
        a = await backend.create(SandboxSpec(workspace=ws))
        b = await backend.create(SandboxSpec(workspace=ws))
        try:
            for sb in (a, b):
                await sb.write_file("pkg0/new.py", b"Y = 1\n")
                await sb.delete_file("pkg1/m1.py")
            sa, sb_ = await a.snapshot(), await b.snapshot()
            layer = backend.snapshots[sa][0]
            files = sorted(str(p.relative_to(layer)) for p in layer.rglob("*") if not p.is_dir())
            await a.reset()
            await a.restore(sa)
            restored = (await a.list_dir("pkg0"), "m1.py" in await a.list_dir("pkg1"))
            forks = await backend.fork(sa, SandboxSpec(workspace=ws), 3)
            forked = [await f.read_file("pkg0/new.py") for f in forks]
            gone = [await f.exec("test -e /workspace/pkg1/m1.py || echo gone") for f in forks]
            for f in forks:
                await f.close()
            return sa, sb_, files, restored, forked, gone
        finally:
            await a.close()
            await b.close()

    sa, sb_, files, restored, forked, gone = run(body())
    assert sa == sb_  # the same change on the same base is the same snapshot
    assert files == ["pkg0/new.py", "pkg1/m1.py"]  # the new file and the whiteout of the deleted one
    assert "new.py" in restored[0] and restored[1] is False
    assert forked == [b"Y = 1\n"] * 3 and all(g.stdout == "gone\n" for g in gone)


def test_pinned_workspace_digest_is_verified_and_later_edits_do_not_leak_in(backend, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("original\n")
    digest = tree_digest(ws)

    async def body():
        sb = await backend.create(SandboxSpec(workspace=ws, workspace_digest=digest))
        first = await sb.read_file("a.txt")
        await sb.close()
        (ws / "a.txt").write_text("tampered\n")
        sb2 = await backend.create(SandboxSpec(workspace=ws, workspace_digest=digest))
        second = await sb2.read_file("a.txt")
        await sb2.close()
        return first, second

    first, second = run(body())
    assert first == second == b"original\n"
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("tampered\n")
    with pytest.raises(SandboxError, match="does not match its pinned digest"):
        run(backend.create(SandboxSpec(workspace=other, workspace_digest=digest)))


def test_root_filesystem_is_read_only_and_userns_are_disabled(backend):
    r = run(
        _with(
            backend,
            SandboxSpec(),
            lambda sb: sb.exec(
                "touch /x 2>/dev/null || echo ro-root; echo 1 > /proc/sys/kernel/ostype 2>/dev/null || echo ro-procsys; "
                "unshare -U true 2>/dev/null || echo no-userns; grep CapEff /proc/self/status"
            ),
        )
    )
    lines = r.stdout.splitlines()
    assert lines[:3] == ["ro-root", "ro-procsys", "no-userns"]
    assert lines[3].split()[1] == "0000000000000000"


def test_closed_sandbox_refuses_work(backend):
    async def body():
        sb = await backend.create(SandboxSpec())
        await sb.close()
        with pytest.raises(SandboxError, match="closed"):
            await sb.exec("true")

    run(body())


def test_extra_mounts_may_not_shadow_writable_places(backend, tmp_path):
    with pytest.raises(SandboxError, match="outside /workspace"):
        run(backend.create(SandboxSpec(extra_ro={"/tmp/x": tmp_path})))
    before = sorted(os.listdir(backend.root))
    assert sorted(os.listdir(backend.root)) == before


@ROOT_ONLY
def test_network_none_is_an_empty_namespace_and_loopback_is_private(backend):
    probe = (
        "python3 - <<'PY'\n"
        "import socket\n"
        "try:\n"
        "    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); c = socket.create_connection(s.getsockname(), 2)\n"
        "    print('loopback works')\n"
        "except OSError as e:\n"
        "    print('no network:', e.errno)\n"
        "PY\n"
        "cat /sys/class/net/lo/operstate 2>/dev/null; ls /sys/class/net 2>/dev/null"
    )
    none = run(_with(backend, SandboxSpec(network="none"), lambda sb: sb.exec(probe)))
    loop = run(_with(backend, SandboxSpec(network="loopback"), lambda sb: sb.exec(probe)))
    assert none.stdout.startswith("no network:")
    assert loop.stdout.startswith("loopback works")
    # and the agent cannot bring the loopback up itself: it holds no capability over its namespace
    up = (
        "python3 - <<'PY'\n"
        "import fcntl, socket, struct\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "try:\n"
        "    fcntl.ioctl(s, 0x8914, struct.pack('16sH14x', b'lo', 1)); print('raised lo')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "PY\n"
    )
    r = run(_with(backend, SandboxSpec(network="none"), lambda sb: sb.exec(up)))
    assert r.stdout.startswith("refused"), r


def test_allowlist_proxy_reaches_only_allowed_hosts_and_logs_every_attempt(backend):
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            body = f"hello from {self.server.server_address[1]}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    allowed, denied = (s.server_address[1] for s in servers)
    fetch = (
        "python3 - <<'PY'\n"
        "import urllib.request, urllib.error, socket\n"
        f"for port in ({allowed}, {denied}):\n"
        "    try:\n"
        "        print(urllib.request.urlopen(f'http://127.0.0.1:{port}/', timeout=10).read().decode())\n"
        "    except urllib.error.HTTPError as e:\n"
        "        print('refused', e.code)\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {allowed}), 2); print('direct works')\n"
        "except OSError:\n"
        "    print('no direct route')\n"
        "PY"
    )

    async def body(sb):
        r = await sb.exec(fetch, timeout=60)
        return r, sb.network_attempts

    try:
        # The "outside" hosts live on the host's loopback here: do not exempt 127.0.0.1 from the proxy.
        spec = SandboxSpec(
            network="allowlist", allow_hosts=(f"127.0.0.1:{allowed}",), env={"NO_PROXY": "", "no_proxy": ""}
        )
        r, attempts = run(_with(backend, spec, body))
    finally:
        for s in servers:
            s.shutdown()
    assert r.stdout.splitlines() == [f"hello from {allowed}", "refused 403", "no direct route"], r
    assert [(a.port, a.allowed) for a in attempts] == [(allowed, True), (denied, False)]
